// SVG plots of benchmark results, drawn by gnuplot (Debian gnuplot-nox): line charts with one
// panel per measure, stacked in one SVG file. Used by `kvferry bench serve --compare --plot` and
// `kvferry bench xfer --plot`; docs/benchmarks.md shows the pictures.
//
//   PlotPanel p{"TTFT", "ms", "fraction of requests"};
//   p.series.push_back({"P/D", points});
//   KVF_RETURN_IF_ERROR(WriteSvgPlot({p}, "ttft.svg", "P/D vs colocated"));
//
// Thread-safety: pure function of its arguments (spawns gnuplot and waits for it).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "kvferry/common/status.h"

namespace kvferry::bench {

struct PlotSeries {
  std::string title;
  std::vector<std::pair<double, double>> points;  // (x, y), drawn in order
  bool dashed = false;                            // ceilings and references
};

struct PlotPanel {
  std::string title;
  std::string xlabel;
  std::string ylabel;
  bool log_x = false;
  std::vector<PlotSeries> series;
};

// Writes `panels` (stacked vertically) to `path` as SVG. Unavailable when gnuplot is not
// installed (naming the Debian package); Internal when it fails (its exit status).
Status WriteSvgPlot(const std::vector<PlotPanel>& panels, const std::string& path,
                    const std::string& title);

// The empirical CDF of `values` as plot points (value, fraction <= value), sorted.
std::vector<std::pair<double, double>> CdfPoints(std::vector<double> values);

}  // namespace kvferry::bench
