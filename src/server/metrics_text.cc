#include "server/metrics_text.h"

#include <fmt/format.h>

#include <cmath>

namespace kvserve::server {
namespace {

class Writer {
 public:
  explicit Writer(const std::string& model) : labels_(fmt::format("model_name=\"{}\"", model)) {}

  void Scalar(const char* type, const char* name, const char* help, double value) {
    Header(type, name, help);
    out_ += fmt::format("kvserve:{}{{{}}} {}\n", name, labels_, value);
  }
  // Buckets are cumulative in Prometheus: le="b" counts every value <= b.
  void Histogram(const char* name, const char* help, const engine::Histogram& h) {
    Header("histogram", name, help);
    int64_t cumulative = 0;
    for (size_t i = 0; i < h.bounds().size(); ++i) {
      cumulative += h.counts()[i];
      out_ += fmt::format("kvserve:{}_bucket{{{},le=\"{}\"}} {}\n", name, labels_, h.bounds()[i],
                          cumulative);
    }
    out_ += fmt::format("kvserve:{}_bucket{{{},le=\"+Inf\"}} {}\n", name, labels_, h.count());
    out_ += fmt::format("kvserve:{}_sum{{{}}} {}\n", name, labels_, h.sum());
    out_ += fmt::format("kvserve:{}_count{{{}}} {}\n", name, labels_, h.count());
  }
  // One sample per value, labelled label="i" for values[i].
  void Labelled(const char* type, const char* name, const char* help, const char* label,
                const std::vector<int64_t>& values) {
    Header(type, name, help);
    for (size_t i = 0; i < values.size(); ++i) {
      out_ += fmt::format("kvserve:{}{{{},{}=\"{}\"}} {}\n", name, labels_, label, i, values[i]);
    }
  }
  std::string Take() { return std::move(out_); }

 private:
  void Header(const char* type, const char* name, const char* help) {
    out_ += fmt::format("# HELP kvserve:{} {}\n# TYPE kvserve:{} {}\n", name, help, name, type);
  }
  std::string labels_;
  std::string out_;
};

}  // namespace

std::string FormatPrometheus(const engine::MetricsSnapshot& m, const ServerCounters& s,
                             const std::string& model_name) {
  Writer w(model_name);
  w.Scalar("gauge", "num_requests_running", "Requests in the running batch.", m.num_running);
  w.Scalar("gauge", "num_requests_waiting", "Requests waiting to be scheduled.", m.num_waiting);
  w.Scalar("gauge", "num_requests_in_flight", "Engine requests the HTTP layer waits on.",
           static_cast<double>(s.num_in_flight));
  w.Scalar("gauge", "kv_cache_usage_perc", "KV cache usage (1 = 100%).", m.kv_usage);
  w.Scalar("gauge", "kv_cache_total_blocks", "Usable KV cache blocks.",
           static_cast<double>(s.num_kv_blocks));
  w.Scalar("gauge", "kv_cache_used_blocks", "KV cache blocks referenced by requests.",
           std::round(m.kv_usage * static_cast<double>(s.num_kv_blocks)));
  w.Scalar("counter", "prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
           static_cast<double>(m.prefix_cache_queries));
  w.Scalar("counter", "prefix_cache_hits_total", "Prompt tokens found in the prefix cache.",
           static_cast<double>(m.prefix_cache_hits));
  w.Scalar("counter", "prefix_cache_loaded_total",
           "Prompt tokens loaded from a KV tier below the device pool.",
           static_cast<double>(m.prefix_cache_loaded));
  w.Scalar("counter", "num_preemptions_total", "Preemptions.",
           static_cast<double>(m.num_preemptions));
  w.Scalar("counter", "prompt_tokens_total", "Prefill tokens computed.",
           static_cast<double>(m.num_prompt_tokens));
  w.Scalar("counter", "generation_tokens_total", "Generated tokens.",
           static_cast<double>(m.num_generation_tokens));
  w.Scalar("counter", "request_success_total", "Finished requests.",
           static_cast<double>(m.num_finished));
  w.Scalar("counter", "num_requests_rejected_total", "Requests answered 503 (queue full).",
           static_cast<double>(s.num_rejected));
  w.Scalar("counter", "engine_steps_total", "Engine steps.", static_cast<double>(m.num_steps));
  w.Scalar("counter", "spec_decode_num_drafts", "Speculative decoding: verifications.",
           static_cast<double>(m.spec_num_drafts));
  w.Scalar("counter", "spec_decode_num_draft_tokens", "Speculative decoding: drafted tokens.",
           static_cast<double>(m.spec_num_draft_tokens));
  w.Scalar("counter", "spec_decode_num_accepted_tokens",
           "Speculative decoding: drafted tokens accepted.",
           static_cast<double>(m.spec_num_accepted_tokens));
  w.Labelled("counter", "spec_decode_num_accepted_tokens_per_pos",
             "Speculative decoding: drafted tokens accepted at each draft position.", "position",
             m.spec_accepted_per_position);
  w.Histogram("time_to_first_token_seconds", "Time to first token.", m.time_to_first_token_s);
  w.Histogram("inter_token_latency_seconds", "Inter-token latency.", m.inter_token_latency_s);
  w.Histogram("time_per_output_token_seconds", "Time per output token.",
              m.time_per_output_token_s);
  w.Histogram("e2e_request_latency_seconds", "End-to-end request latency.", m.e2e_latency_s);
  w.Histogram("request_queue_time_seconds", "Arrival to first scheduled.", m.queue_time_s);
  w.Histogram("iteration_tokens_total", "Tokens per engine step.", m.tokens_per_step);
  return w.Take();
}

}  // namespace kvserve::server
