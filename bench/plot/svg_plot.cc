#include "bench/plot/svg_plot.h"

#include <fmt/format.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>

namespace kvferry::bench {
namespace {

// gnuplot strings are single-quoted; a quote inside doubles.
std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

// The script: every series as an inline datablock, then one plot per panel.
std::string Script(const std::vector<PlotPanel>& panels, const std::string& path,
                   const std::string& title) {
  const int height = 320 * static_cast<int>(panels.size()) + 40;
  std::string s = fmt::format(
      "set terminal svg size 900,{} dynamic enhanced font 'sans,11' background 'white'\n"
      "set output {}\nset grid\nset key outside right top\nset datafile separator ' '\n",
      height, Quote(path));
  for (size_t p = 0; p < panels.size(); ++p) {
    for (size_t i = 0; i < panels[p].series.size(); ++i) {
      s += fmt::format("$d{}_{} << EOD\n", p, i);
      for (const auto& [x, y] : panels[p].series[i].points) s += fmt::format("{} {}\n", x, y);
      s += "EOD\n";
    }
  }
  s += fmt::format("set multiplot layout {},1 title {}\n", panels.size(), Quote(title));
  for (size_t p = 0; p < panels.size(); ++p) {
    const PlotPanel& panel = panels[p];
    s += fmt::format("set title {}\nset xlabel {}\nset ylabel {}\n{}\n", Quote(panel.title),
                     Quote(panel.xlabel), Quote(panel.ylabel),
                     panel.log_x ? "set logscale x 2" : "unset logscale x");
    s += "plot ";
    for (size_t i = 0; i < panel.series.size(); ++i) {
      const PlotSeries& series = panel.series[i];
      s += fmt::format("{}$d{}_{} using 1:2 with linespoints {} title {}", i ? ", " : "", p, i,
                       series.dashed ? "dashtype 2 pointtype 0" : "pointtype 7 pointsize 0.5",
                       Quote(series.title));
    }
    s += "\n";
  }
  return s + "unset multiplot\n";
}

}  // namespace

Status WriteSvgPlot(const std::vector<PlotPanel>& panels, const std::string& path,
                    const std::string& title) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    return UnavailableError("gnuplot is not installed (Debian package gnuplot-nox)");
  }
  FILE* gp = popen("gnuplot", "w");
  if (gp == nullptr) return UnavailableError("cannot start gnuplot");
  const std::string script = Script(panels, path, title);
  std::fwrite(script.data(), 1, script.size(), gp);
  const int status = pclose(gp);
  if (status != 0) {
    return InternalError(fmt::format("gnuplot failed (status {}) writing '{}'", status, path));
  }
  return Status::Ok();
}

std::vector<std::pair<double, double>> CdfPoints(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  std::vector<std::pair<double, double>> out;
  out.reserve(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    out.emplace_back(values[i], static_cast<double>(i + 1) / static_cast<double>(values.size()));
  }
  return out;
}

}  // namespace kvferry::bench
