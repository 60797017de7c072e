// A main() for the fuzz targets in builds without libFuzzer (g++): runs LLVMFuzzerTestOneInput
// once over every file named on the command line, or every file in a named folder. CTest uses
// it to replay the committed seed corpus and the regression inputs (crashes found by fuzzing)
// in every `make test`, so a fixed crash stays fixed without clang.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

int RunFile(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", p.c_str());
    return 1;
  }
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // A fresh heap copy of exactly `size` bytes, as libFuzzer hands them over (so an over-read
  // is visible to ASan).
  std::vector<uint8_t> copy(bytes.begin(), bytes.end());
  LLVMFuzzerTestOneInput(copy.data(), copy.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int inputs = 0, errors = 0;
  for (int i = 1; i < argc; ++i) {
    std::filesystem::path p(argv[i]);
    if (std::filesystem::is_directory(p)) {
      for (const auto& e : std::filesystem::directory_iterator(p)) {
        if (!e.is_regular_file()) continue;
        errors += RunFile(e.path());
        ++inputs;
      }
    } else {
      errors += RunFile(p);
      ++inputs;
    }
  }
  std::printf("ran %d inputs, %d unreadable\n", inputs, errors);
  return (errors != 0 || inputs == 0) ? 1 : 0;
}
