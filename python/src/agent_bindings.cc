// kvferry.Agent: transfer::Agent for Python (docs/python.md). Registered memory is any writable
// C-contiguous object with the buffer protocol (bytearray, memoryview, numpy array, mmap), a CPU
// torch tensor (through its data_ptr), or a raw pointer + size. The agent keeps the object
// alive, and for a buffer holds the buffer export (so a bytearray cannot be resized under it),
// until deregister_memory or close.
#include "agent_bindings.h"

#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kvferry/transfer/agent.h"
#include "status_error.h"

namespace nb = nanobind;

namespace kvferry::python {
namespace {

using transfer::Agent;
using transfer::Descriptor;
using transfer::DescriptorList;
using transfer::RegionHandle;

// What keeps one registered region's memory valid.
struct Pinned {
  nb::object owner;  // the registered object (None for pointer + size)
  Py_buffer view{};  // held while registered, when `owner` exported a buffer
  bool has_view = false;
  void Release() {
    if (has_view) PyBuffer_Release(&view);
    has_view = false;
    owner = nb::none();
  }
};

struct Memory {
  void* addr = nullptr;
  uint64_t length = 0;
};

// A torch tensor (or anything shaped like one) on the CPU, contiguous: its bytes.
Memory TensorMemory(nb::handle t) {
  nb::object device = t.attr("device");
  std::string type = nb::cast<std::string>(device.attr("type"));
  if (type != "cpu") {
    throw StatusError(UnimplementedError("register_memory: a tensor on device '" + type +
                                         "'; this build registers host memory only"));
  }
  if (!nb::cast<bool>(t.attr("is_contiguous")())) {
    throw StatusError(InvalidArgumentError("register_memory: the tensor is not contiguous"));
  }
  uint64_t numel = nb::cast<uint64_t>(t.attr("numel")());
  uint64_t elem = nb::cast<uint64_t>(t.attr("element_size")());
  auto ptr = nb::cast<uintptr_t>(t.attr("data_ptr")());
  return {reinterpret_cast<void*>(ptr), numel * elem};
}

class PyAgent {
 public:
  PyAgent(const std::string& name, const std::string& backend, const std::string& ucx_transport,
          const std::string& listen_host, uint16_t listen_port) {
    transfer::AgentOptions options;
    options.name = name;
    options.backend = ValueOrThrow(transfer::ParseBackendKind(backend));
    options.ucx.transport = ValueOrThrow(transfer::ParseUcxTransport(ucx_transport));
    options.socket = {.listen_host = listen_host, .listen_port = listen_port};
    nb::gil_scoped_release release;
    agent_ = ValueOrThrow(Agent::Create(options));
  }
  ~PyAgent() { Close(); }

  const std::string& name() { return Get().name(); }

  // Register*: (region id, length in bytes) of the new region.
  std::pair<uint32_t, uint64_t> RegisterObject(nb::handle obj) {
    Pinned pin;
    Memory mem;
    if (PyObject_CheckBuffer(obj.ptr())) {
      if (PyObject_GetBuffer(obj.ptr(), &pin.view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) != 0) {
        PyErr_Clear();
        throw StatusError(InvalidArgumentError(
            "register_memory: the object's buffer is not writable and C-contiguous"));
      }
      pin.has_view = true;
      mem = {pin.view.buf, static_cast<uint64_t>(pin.view.len)};
    } else if (nb::hasattr(obj, "data_ptr") && nb::hasattr(obj, "device")) {
      mem = TensorMemory(obj);
    } else {
      throw StatusError(InvalidArgumentError(
          "register_memory: expected an object with the buffer protocol or a torch tensor"));
    }
    pin.owner = nb::borrow(obj);
    return Register(mem, std::move(pin));
  }

  std::pair<uint32_t, uint64_t> RegisterPointer(uintptr_t ptr, uint64_t size) {
    return Register({reinterpret_cast<void*>(ptr), size}, Pinned{});
  }

  void Deregister(uint32_t region) {
    ThrowIfError(Get().DeregisterMemory(RegionHandle{region}));
    auto it = pinned_.find(region);
    if (it != pinned_.end()) {
      it->second.Release();
      pinned_.erase(it);
    }
  }

  nb::bytes LocalMetadata() {
    std::string blob = ValueOrThrow(Get().GetLocalMetadata());
    return nb::bytes(blob.data(), blob.size());
  }

  uint32_t LoadRemoteMetadata(nb::bytes blob) {
    std::string copy(blob.c_str(), blob.size());
    nb::gil_scoped_release release;
    return ValueOrThrow(Get().LoadRemoteMetadata(copy)).id;
  }

  void RemovePeer(uint32_t peer) { ThrowIfError(Get().RemovePeer({peer})); }
  std::string PeerName(uint32_t peer) { return ValueOrThrow(Get().PeerName({peer})); }

  uint64_t Prepare(transfer::XferOp op, uint32_t peer, nb::handle local, nb::handle remote,
                   nb::bytes notification, int64_t timeout_ms) {
    transfer::TransferRequest request;
    request.op = op;
    request.peer = {peer};
    request.local = Descriptors(local, "local");
    request.remote = Descriptors(remote, "remote");
    request.notification.assign(notification.c_str(), notification.size());
    request.timeout_ms = timeout_ms;
    return ValueOrThrow(Get().PrepareTransfer(request)).id;
  }

  transfer::XferInfo Info(uint64_t xfer) { return ValueOrThrow(Get().GetXferInfo({xfer})); }

  void Post(uint64_t xfer) {
    Agent& a = Get();
    nb::gil_scoped_release release;
    ThrowIfError(a.Post({xfer}));
  }
  transfer::XferState Poll(uint64_t xfer) {
    Agent& a = Get();
    nb::gil_scoped_release release;
    return ValueOrThrow(a.Poll({xfer}));
  }
  void Wait(uint64_t xfer, int64_t timeout_ms) {
    Agent& a = Get();
    nb::gil_scoped_release release;
    ThrowIfError(a.Wait({xfer}, Deadline::AfterMs(timeout_ms)));
  }
  void ReleaseXfer(uint64_t xfer) { ThrowIfError(Get().Release({xfer})); }

  void SendNotification(uint32_t peer, nb::bytes message) {
    ThrowIfError(Get().SendNotification({peer}, {message.c_str(), message.size()}));
  }
  nb::list Notifications() { return ToList(Get().GetNotifications()); }
  // {"refused_inbound": {reason: count}} (transfer::AgentStats).
  nb::dict Stats() {
    nb::dict refused;
    for (const auto& [reason, n] : Get().Stats().refused_inbound) refused[reason.c_str()] = n;
    nb::dict d;
    d["refused_inbound"] = refused;
    return d;
  }
  nb::list WaitNotifications(int64_t timeout_ms) {
    Agent& a = Get();
    std::vector<transfer::Notification> got;
    {
      nb::gil_scoped_release release;
      got = a.WaitNotifications(Deadline::AfterMs(timeout_ms));
    }
    return ToList(got);
  }

  // Destroys the agent (its peers, transfers and registrations), then lets go of the memory.
  void Close() {
    if (agent_ != nullptr) {
      nb::gil_scoped_release release;
      agent_.reset();
    }
    for (auto& [id, pin] : pinned_) pin.Release();
    pinned_.clear();
  }

 private:
  Agent& Get() {
    if (agent_ == nullptr) throw StatusError(FailedPreconditionError("the agent is closed"));
    return *agent_;
  }

  std::pair<uint32_t, uint64_t> Register(Memory mem, Pinned pin) {
    StatusOr<RegionHandle> region =
        Get().RegisterMemory(mem.addr, mem.length, transfer::MemoryKind::kHost);
    if (!region.ok()) {
      pin.Release();
      throw StatusError(region.status());
    }
    pinned_.emplace(region->id, std::move(pin));
    return {region->id, mem.length};
  }

  // (region, offset, length) triples; region is a Region id (int).
  static DescriptorList Descriptors(nb::handle list, const char* side) {
    DescriptorList out;
    for (nb::handle item : list) {
      nb::tuple t = nb::cast<nb::tuple>(item);
      if (t.size() != 3) {
        throw StatusError(InvalidArgumentError(std::string(side) +
                                               " descriptor: expected (region, offset, length)"));
      }
      out.push_back({.region = {nb::cast<uint32_t>(t[0])},
                     .offset = nb::cast<uint64_t>(t[1]),
                     .length = nb::cast<uint64_t>(t[2])});
    }
    return out;
  }

  static nb::list ToList(const std::vector<transfer::Notification>& got) {
    nb::list out;
    for (const auto& n : got) {
      out.append(nb::make_tuple(n.peer_name, nb::bytes(n.message.data(), n.message.size())));
    }
    return out;
  }

  std::unique_ptr<Agent> agent_;
  std::unordered_map<uint32_t, Pinned> pinned_;
};

void RegisterEnums(nb::module_& m) {
  nb::enum_<transfer::XferOp>(m, "XferOp", "READ: remote -> local. WRITE: local -> remote.")
      .value("READ", transfer::XferOp::kRead)
      .value("WRITE", transfer::XferOp::kWrite);
  nb::enum_<transfer::XferState>(m, "XferState", "Progress of a posted transfer.")
      .value("IN_PROGRESS", transfer::XferState::kInProgress)
      .value("DONE", transfer::XferState::kDone);
  nb::class_<transfer::XferInfo>(m, "XferInfo", "Facts about a prepared transfer.")
      .def_ro("total_bytes", &transfer::XferInfo::total_bytes)
      .def_ro("num_descriptors_requested", &transfer::XferInfo::num_descriptors_requested)
      .def_ro("num_descriptors_merged", &transfer::XferInfo::num_descriptors_merged)
      .def_ro("by_memcpy", &transfer::XferInfo::by_memcpy);
}

}  // namespace

void RegisterAgent(nb::module_& m) {
  RegisterEnums(m);
  nb::class_<PyAgent>(m, "_Agent")
      .def(nb::init<const std::string&, const std::string&, const std::string&, const std::string&,
                    uint16_t>(),
           nb::arg("name"), nb::arg("backend"), nb::arg("ucx_transport"), nb::arg("listen_host"),
           nb::arg("listen_port"))
      .def_prop_ro("name", &PyAgent::name)
      .def("register_object", &PyAgent::RegisterObject, nb::arg("obj"))
      .def("register_pointer", &PyAgent::RegisterPointer, nb::arg("ptr"), nb::arg("size"))
      .def("deregister", &PyAgent::Deregister, nb::arg("region"))
      .def("local_metadata", &PyAgent::LocalMetadata)
      .def("load_remote_metadata", &PyAgent::LoadRemoteMetadata, nb::arg("blob"))
      .def("remove_peer", &PyAgent::RemovePeer, nb::arg("peer"))
      .def("peer_name", &PyAgent::PeerName, nb::arg("peer"))
      .def("prepare", &PyAgent::Prepare, nb::arg("op"), nb::arg("peer"), nb::arg("local"),
           nb::arg("remote"), nb::arg("notification"), nb::arg("timeout_ms"))
      .def("info", &PyAgent::Info, nb::arg("xfer"))
      .def("post", &PyAgent::Post, nb::arg("xfer"))
      .def("poll", &PyAgent::Poll, nb::arg("xfer"))
      .def("wait", &PyAgent::Wait, nb::arg("xfer"), nb::arg("timeout_ms"))
      .def("release", &PyAgent::ReleaseXfer, nb::arg("xfer"))
      .def("send_notification", &PyAgent::SendNotification, nb::arg("peer"), nb::arg("message"))
      .def("notifications", &PyAgent::Notifications)
      .def("stats", &PyAgent::Stats, "The agent's counters since creation (AgentStats).")
      .def("wait_notifications", &PyAgent::WaitNotifications, nb::arg("timeout_ms"))
      .def("close", &PyAgent::Close);
}

}  // namespace kvferry::python
