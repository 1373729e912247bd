#include "sim/workload.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <random>

#include "planner/json_fields.h"
#include "sampling/rng.h"

namespace kvserve::sim {
namespace {

Result<std::vector<double>> ParseNumbers(std::string_view text, size_t count,
                                         std::string_view whole) {
  std::vector<double> out;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string item(text.substr(0, comma));
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (item.empty() || end != item.c_str() + item.size() || !std::isfinite(v)) {
      return InvalidArgument(fmt::format("length distribution '{}': '{}' is not a number",
                                         whole, item));
    }
    out.push_back(v);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
  }
  if (out.size() != count) {
    return InvalidArgument(fmt::format("length distribution '{}' needs {} number(s)", whole, count));
  }
  return out;
}

int64_t Draw(const LengthDist& d, std::mt19937_64& rng, int64_t max_len) {
  double v = d.a;
  switch (d.kind) {
    case LengthDist::Kind::kFixed: return std::llround(v);  // too long: the scheduler says so
    case LengthDist::Kind::kUniform:
      v = std::uniform_int_distribution<int64_t>(static_cast<int64_t>(d.a),
                                                 static_cast<int64_t>(d.b))(rng);
      break;
    case LengthDist::Kind::kLognormal: {
      const double mu = std::log(d.a) - d.b * d.b / 2;  // so that the mean is d.a
      v = std::lognormal_distribution<double>(mu, d.b)(rng);
      break;
    }
    case LengthDist::Kind::kExponential:
      v = std::exponential_distribution<double>(1.0 / d.a)(rng);
      break;
  }
  return std::clamp<int64_t>(std::llround(v), 1, std::max<int64_t>(1, max_len));
}

Result<RequestSpec> ParseTraceLine(const planner::Json& j) {
  using planner::IntField;
  using planner::NumberField;
  if (!j.is_object()) return InvalidArgument("not a JSON object");
  RequestSpec r;
  const char* time_key = j.contains("timestamp") ? "timestamp" : "arrival_time";
  KV_ASSIGN_OR_RETURN(r.arrival, NumberField(j, time_key, 0.0));
  if (r.arrival < 0) return InvalidArgument(fmt::format("{} must not be negative", time_key));
  if (auto ids = j.find("prompt_token_ids"); ids != j.end()) {
    if (!ids->is_array() || ids->empty()) {
      return InvalidArgument("prompt_token_ids must be a non-empty array");
    }
    for (const planner::Json& t : *ids) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0) {
        return InvalidArgument("prompt_token_ids must hold non-negative integers");
      }
      r.prompt_ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    r.input_len = static_cast<int64_t>(r.prompt_ids.size());
  } else {
    const char* key = j.contains("prompt_len") ? "prompt_len" : "input_len";
    KV_ASSIGN_OR_RETURN(r.input_len, IntField(j, key, std::nullopt));
  }
  const char* out_key = j.contains("max_tokens") ? "max_tokens" : "output_len";
  KV_ASSIGN_OR_RETURN(r.output_len, IntField(j, out_key, std::nullopt));
  KV_ASSIGN_OR_RETURN(int64_t group, IntField(j, "prefix_group", 0));
  KV_ASSIGN_OR_RETURN(r.prefix_len, IntField(j, "prefix_len", 0));
  if (r.input_len < 1 || r.output_len < 1) {
    return InvalidArgument("input and output lengths must be at least 1");
  }
  if (group < 0 || group > std::numeric_limits<int>::max() || r.prefix_len < 0 ||
      r.prefix_len > r.input_len) {
    return InvalidArgument("prefix_group must be >= 0 and prefix_len within the prompt");
  }
  r.prefix_group = static_cast<int>(group);
  return r;
}

Result<std::vector<RequestSpec>> ReadTrace(const std::string& path) {
  std::ifstream in(path);
  if (!in) return IoError(fmt::format("cannot read trace {}", path));
  std::vector<RequestSpec> out;
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    Result<planner::Json> j = planner::ParseJsonText(line, "trace line");
    Result<RequestSpec> r = j.ok() ? ParseTraceLine(*j) : Result<RequestSpec>(j.status());
    if (!r.ok()) return r.status().WithContext(fmt::format("{}:{}", path, line_no));
    out.push_back(*std::move(r));
  }
  if (out.empty()) return InvalidArgument(fmt::format("trace {} has no requests", path));
  return out;
}

}  // namespace

Result<LengthDist> ParseLengthDist(std::string_view text, double mean) {
  const size_t colon = text.find(':');
  const std::string_view kind = text.substr(0, colon);
  const std::string_view args =
      colon == std::string_view::npos ? std::string_view() : text.substr(colon + 1);
  LengthDist d;
  d.a = mean;
  if (kind == "fixed") {
    if (!args.empty()) {
      KV_ASSIGN_OR_RETURN(std::vector<double> v, ParseNumbers(args, 1, text));
      d.a = v[0];
    }
    if (!(d.a >= 1)) return InvalidArgument(fmt::format("'{}': need a length >= 1", text));
    return d;
  }
  if (kind == "uniform") {
    KV_ASSIGN_OR_RETURN(std::vector<double> v, ParseNumbers(args, 2, text));
    if (v[0] < 1 || v[1] < v[0]) {
      return InvalidArgument(fmt::format("'{}': need 1 <= LO <= HI", text));
    }
    return LengthDist{LengthDist::Kind::kUniform, v[0], v[1]};
  }
  if (kind == "lognormal") {
    KV_ASSIGN_OR_RETURN(std::vector<double> v, ParseNumbers(args, 2, text));
    if (!(v[0] >= 1) || !(v[1] > 0)) {
      return InvalidArgument(fmt::format("'{}': need MEAN >= 1 and SIGMA > 0", text));
    }
    return LengthDist{LengthDist::Kind::kLognormal, v[0], v[1]};
  }
  if (kind == "exponential") {
    KV_ASSIGN_OR_RETURN(std::vector<double> v, ParseNumbers(args, 1, text));
    if (!(v[0] >= 1)) return InvalidArgument(fmt::format("'{}': need MEAN >= 1", text));
    return LengthDist{LengthDist::Kind::kExponential, v[0], 0};
  }
  return InvalidArgument(fmt::format("unknown length distribution '{}' (fixed, uniform:LO,HI, "
                                     "lognormal:MEAN,SIGMA, exponential:MEAN)", text));
}

Result<Arrivals> ParseArrivals(std::string_view text) {
  if (text == "even") return Arrivals::kEven;
  if (text == "poisson") return Arrivals::kPoisson;
  return InvalidArgument(fmt::format("--arrivals must be even or poisson, got '{}'", text));
}

Result<std::vector<RequestSpec>> MakeWorkload(const WorkloadSpec& spec, int64_t max_len) {
  std::vector<RequestSpec> out;
  if (!spec.trace_path.empty()) {
    KV_ASSIGN_OR_RETURN(out, ReadTrace(spec.trace_path));
  } else {
    if (spec.num_prompts < 1 || spec.input_len < 1 || spec.output_len < 1) {
      return InvalidArgument("--num-prompts, --input-len and --output-len must be at least 1");
    }
    if (!(spec.request_rate > 0)) return InvalidArgument("--request-rate must be positive");
    if (spec.num_prefix_groups < 1 || spec.shared_prefix_len < 0) {
      return InvalidArgument("--num-prefix-groups must be >= 1, --shared-prefix-len >= 0");
    }
    std::mt19937_64 rng(spec.seed);
    double t = 0;
    for (int i = 0; i < spec.num_prompts; ++i) {
      RequestSpec r;
      const LengthDist fixed_in{LengthDist::Kind::kFixed, static_cast<double>(spec.input_len), 0};
      const LengthDist fixed_out{LengthDist::Kind::kFixed, static_cast<double>(spec.output_len), 0};
      r.input_len = Draw(spec.input_dist.value_or(fixed_in), rng, max_len - 1);
      r.output_len = Draw(spec.output_dist.value_or(fixed_out), rng, max_len - r.input_len);
      r.prefix_group = i % spec.num_prefix_groups;
      r.prefix_len = std::min(spec.shared_prefix_len, r.input_len);
      if (!std::isinf(spec.request_rate)) {
        if (spec.arrivals == Arrivals::kEven) {
          t = i / spec.request_rate;
        } else if (i > 0) {
          t += std::exponential_distribution<double>(spec.request_rate)(rng);
        }
      }
      r.arrival = t;
      out.push_back(std::move(r));
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const RequestSpec& a, const RequestSpec& b) {
    return a.arrival < b.arrival;
  });
  return out;
}

std::vector<int32_t> PromptTokens(const RequestSpec& request, size_t index, uint64_t seed,
                                  int32_t vocab) {
  if (!request.prompt_ids.empty()) return request.prompt_ids;
  using sampling::Mix64;
  std::vector<int32_t> tokens(static_cast<size_t>(request.input_len));
  const uint64_t group_stream = Mix64(seed ^ Mix64(0x5EED0000ull + request.prefix_group));
  const uint64_t own_stream = Mix64(seed ^ Mix64(0xA11C0000ull ^ Mix64(index)));
  for (int64_t p = 0; p < request.input_len; ++p) {
    const uint64_t stream = p < request.prefix_len ? group_stream : own_stream;
    tokens[p] = static_cast<int32_t>(sampling::RandomBits(stream, p) % static_cast<uint64_t>(vocab));
  }
  return tokens;
}

int32_t GeneratedToken(uint64_t seed, size_t index, int64_t position, int32_t vocab) {
  const uint64_t stream = sampling::Mix64(seed ^ sampling::Mix64(0x0D7E0000ull ^ sampling::Mix64(index)));
  return static_cast<int32_t>(sampling::RandomBits(stream, position) % static_cast<uint64_t>(vocab));
}

}  // namespace kvserve::sim
