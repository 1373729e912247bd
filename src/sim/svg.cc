#include "sim/svg.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "sim/report.h"

namespace kvserve::sim {
namespace {

constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                                   "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};
constexpr double kWidth = 1100, kHeight = 800;

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else out += c;
  }
  return out;
}

// A 1-2-5 step that gives about five ticks over [0, hi].
double NiceStep(double hi) {
  const double raw = std::max(hi, 1e-12) / 5;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * p >= raw) return m * p;
  }
  return 10 * p;
}

std::string Number(double v) {
  if (v == 0) return "0";
  if (std::fabs(v) >= 1000) return fmt::format("{:.0f}", v);
  if (std::fabs(v) >= 1) return fmt::format("{:.4g}", v);
  return fmt::format("{:.3g}", v);
}

// One chart: a frame at (x, y) of size (w, h) mapping [x0, x1] x [y0, y1] (log10 in x when
// log_x) onto it.
struct Panel {
  double x, y, w, h;
  double x0, x1, y0, y1;
  bool log_x = false;

  double Px(double v) const {
    const double a = log_x ? std::log10(std::max(v, x0)) : v;
    const double lo = log_x ? std::log10(x0) : x0;
    const double hi = log_x ? std::log10(x1) : x1;
    return x + w * (hi > lo ? (a - lo) / (hi - lo) : 0);
  }
  double Py(double v) const { return y + h - h * (y1 > y0 ? (v - y0) / (y1 - y0) : 0); }

  std::string Frame(const std::string& title, const std::string& xlabel,
                    const std::string& ylabel) const {
    std::string s = fmt::format(
        "<rect x='{:.1f}' y='{:.1f}' width='{:.1f}' height='{:.1f}' fill='white' "
        "stroke='#444'/>\n<text x='{:.1f}' y='{:.1f}' font-size='15' font-weight='bold'>{}</text>\n"
        "<text x='{:.1f}' y='{:.1f}' font-size='12' text-anchor='middle'>{}</text>\n"
        "<text transform='translate({:.1f},{:.1f}) rotate(-90)' font-size='12' "
        "text-anchor='middle'>{}</text>\n",
        x, y, w, h, x, y - 10, Escape(title), x + w / 2, y + h + 34, Escape(xlabel), x - 48,
        y + h / 2, Escape(ylabel));
    auto tick_x = [&](double v, const std::string& text) {
      const double px = Px(v);
      s += fmt::format("<line x1='{0:.1f}' y1='{1:.1f}' x2='{0:.1f}' y2='{2:.1f}' stroke='#ddd'/>"
                       "<text x='{0:.1f}' y='{3:.1f}' font-size='11' text-anchor='middle'>{4}"
                       "</text>\n", px, y, y + h, y + h + 16, text);
    };
    if (log_x) {
      for (double d = std::pow(10.0, std::ceil(std::log10(x0))); d <= x1 * 1.0001; d *= 10) {
        tick_x(d, d >= 1 ? Number(d) + " s" : Number(d * 1e3) + " ms");
      }
    } else {
      const double step = NiceStep(x1 - x0);
      for (double v = x0; v <= x1 + step * 1e-6; v += step) tick_x(v, Number(v));
    }
    const double ystep = NiceStep(y1 - y0);
    for (double v = y0; v <= y1 + ystep * 1e-6; v += ystep) {
      s += fmt::format("<line x1='{0:.1f}' y1='{1:.1f}' x2='{2:.1f}' y2='{1:.1f}' stroke='#ddd'/>"
                       "<text x='{3:.1f}' y='{4:.1f}' font-size='11' text-anchor='end'>{5}"
                       "</text>\n", x, Py(v), x + w, x - 6, Py(v) + 4, Number(v));
    }
    return s;
  }

  std::string Line(const std::vector<std::pair<double, double>>& points, const char* color,
                   bool dashed) const {
    if (points.empty()) return "";
    std::string s = fmt::format("<polyline fill='none' stroke='{}' stroke-width='1.8'{} points='",
                                color, dashed ? " stroke-dasharray='6,4'" : "");
    for (const auto& [px, py] : points) s += fmt::format("{:.1f},{:.1f} ", Px(px), Py(py));
    return s + "'/>\n";
  }
};

// The latency range of all series (for a shared log axis), padded to whole decades.
std::pair<double, double> LogRange(const std::vector<std::vector<double>>& all) {
  double lo = 1e300, hi = 0;
  for (const std::vector<double>& v : all) {
    for (double x : v) {
      if (x > 0) lo = std::min(lo, x);
      hi = std::max(hi, x);
    }
  }
  if (hi <= 0) return {1e-3, 1};
  return {std::pow(10.0, std::floor(std::log10(lo))), std::pow(10.0, std::ceil(std::log10(hi)))};
}

std::vector<std::pair<double, double>> Series(const SimResult& r,
                                              const std::function<double(const TimelinePoint&)>& f) {
  std::vector<std::pair<double, double>> out;
  for (const TimelinePoint& p : ThinTimeline(r.timeline, 1500)) out.emplace_back(p.time, f(p));
  return out;
}

}  // namespace

std::string FormatSvg(const std::string& title, std::span<const PlotSeries> series) {
  std::string s = fmt::format(
      "<svg xmlns='http://www.w3.org/2000/svg' width='{0:.0f}' height='{1:.0f}' viewBox='0 0 "
      "{0:.0f} {1:.0f}' font-family='Helvetica, Arial, sans-serif'>\n<rect width='100%' "
      "height='100%' fill='#fafafa'/>\n<text x='20' y='28' font-size='18' font-weight='bold'>{2}"
      "</text>\n", kWidth, kHeight, Escape(title));
  double t_end = 0, max_queue = 1;
  std::vector<std::vector<double>> ttfts, itls;
  std::vector<RequestLatencies> lat;
  for (const PlotSeries& p : series) {
    t_end = std::max(t_end, p.result->elapsed);
    for (const TimelinePoint& t : p.result->timeline) {
      max_queue = std::max<double>(max_queue, std::max(t.num_running, t.num_waiting));
    }
    lat.push_back(Latencies(*p.result));
    ttfts.push_back(lat.back().ttft);
    itls.push_back(p.result->inter_token_latencies);
    itls.push_back(lat.back().tpot);
  }
  const Panel usage{80, 80, 430, 250, 0, std::max(t_end, 1e-9), 0, 100};
  const Panel queue{620, 80, 430, 250, 0, std::max(t_end, 1e-9), 0, max_queue};
  const auto [t0, t1] = LogRange(ttfts);
  const Panel ttft{80, 440, 430, 250, t0, t1, 0, 1, true};
  const auto [i0, i1] = LogRange(itls);
  const Panel itl{620, 440, 430, 250, i0, i1, 0, 1, true};
  s += usage.Frame("KV cache usage", "time (s, simulated)", "% of blocks held");
  s += queue.Frame("Requests running (solid), waiting (dashed)", "time (s, simulated)",
                   "requests");
  s += ttft.Frame("Time to first token, CDF", "TTFT", "fraction of requests");
  s += itl.Frame("ITL (solid) and TPOT (dashed), CDF", "latency", "fraction");
  for (size_t i = 0; i < series.size(); ++i) {
    const char* color = kColors[i % std::size(kColors)];
    const SimResult& r = *series[i].result;
    s += usage.Line(Series(r, [](const TimelinePoint& p) { return 100 * p.kv_usage; }), color, false);
    s += queue.Line(Series(r, [](const TimelinePoint& p) { return p.num_running; }), color, false);
    s += queue.Line(Series(r, [](const TimelinePoint& p) { return p.num_waiting; }), color, true);
    s += ttft.Line(Cdf(lat[i].ttft, 400), color, false);
    s += itl.Line(Cdf(r.inter_token_latencies, 400), color, false);
    s += itl.Line(Cdf(lat[i].tpot, 400), color, true);
    const double ly = 752 + 18.0 * static_cast<double>(i / 2);
    const double lx = 80 + 540.0 * static_cast<double>(i % 2);
    s += fmt::format("<line x1='{0:.0f}' y1='{1:.0f}' x2='{2:.0f}' y2='{1:.0f}' stroke='{3}' "
                     "stroke-width='3'/><text x='{4:.0f}' y='{5:.0f}' font-size='13'>{6}</text>\n",
                     lx, ly, lx + 30, color, lx + 38, ly + 4, Escape(series[i].label));
  }
  return s + "</svg>\n";
}

}  // namespace kvserve::sim
