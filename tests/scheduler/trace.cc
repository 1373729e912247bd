#include "scheduler/trace.h"

#include <fmt/format.h>

#include <map>
#include <memory>
#include <sstream>

#include "kv/kv_cache_manager.h"
#include "scheduler/scheduler.h"

namespace kvserve::scheduler::testing {
namespace {

using Args = std::map<std::string, std::string>;

Args ParseArgs(std::istringstream& in) {
  Args args;
  std::string word;
  while (in >> word) {
    const size_t eq = word.find('=');
    if (eq == std::string::npos) {
      args[word] = "";
    } else {
      args[word.substr(0, eq)] = word.substr(eq + 1);
    }
  }
  return args;
}

int64_t IntArg(const Args& args, const std::string& key, int64_t fallback) {
  auto it = args.find(key);
  return it == args.end() ? fallback : std::stoll(it->second);
}

// The fake model: the token after `history` (a pure function of it).
TokenId NextToken(std::span<const TokenId> history) {
  uint64_t h = 1469598103934665603ull;
  for (TokenId t : history) h = (h ^ static_cast<uint64_t>(t)) * 1099511628211ull;
  return static_cast<TokenId>(h % 997) + 3;
}

struct Spec {
  std::vector<TokenId> prompt;
  std::optional<int64_t> max_tokens;  // absent: until max_model_len
  int64_t stop_after = 0;  // 0: never
  std::string salt;
};

class Trace {
 public:
  std::vector<std::string> failures;

  void Run(const std::string& script) {
    std::istringstream lines(script);
    std::string line;
    int number = 0;
    while (std::getline(lines, line)) {
      ++number;
      line_ = number;
      const size_t hash = line.find('#');
      if (hash != std::string::npos) line.resize(hash);
      std::istringstream in(line);
      std::string command;
      if (!(in >> command)) continue;
      std::string name;
      if (command == "add" || command == "abort") in >> name;
      Args args = ParseArgs(in);
      if (command == "config") Configure(args);
      else if (command == "add") Add(name, args);
      else if (command == "step") Step();
      else if (command == "run") RunAll();
      else if (command == "abort") Abort(name);
      else if (command == "expect") Expect(args);
      else if (command == "expect_solo") ExpectSolo();
      else Fail(fmt::format("unknown command '{}'", command));
    }
  }

 private:
  void Fail(const std::string& message) {
    failures.push_back(fmt::format("line {}: {}", line_, message));
  }

  static std::unique_ptr<kv::KvCacheManager> MakeKv(int64_t blocks, int block_size,
                                                    int64_t max_model_len, bool caching) {
    kv::KvCacheConfig config;
    config.num_layers = 1;
    config.block_size = block_size;
    config.max_model_len = max_model_len;
    config.groups.push_back({kv::FullAttention{1, 2, tensor::DType::kF32}, {0}, {}});
    const int64_t page = kv::GroupBlockBytes(config, 0);
    kv::KvCacheManagerOptions options;
    options.enable_prefix_caching = caching;
    options.allocate_memory = false;
    options.fingerprint.block_size = block_size;
    auto kv = kv::KvCacheManager::Create(config, (blocks + 1) * page, options);
    CHECK(kv.ok()) << kv.status().ToString();
    CHECK_EQ(kv.value()->pool(0).NumUsableBlocks(), blocks);
    return std::move(kv).value();
  }

  void Configure(const Args& args) {
    blocks_ = IntArg(args, "blocks", 64);
    block_size_ = static_cast<int>(IntArg(args, "block_size", 4));
    caching_ = IntArg(args, "prefix_caching", 1) != 0;
    config_.max_num_seqs = static_cast<int>(IntArg(args, "max_num_seqs", 256));
    config_.max_num_batched_tokens = IntArg(args, "max_num_batched_tokens", 2048);
    config_.max_model_len = IntArg(args, "max_model_len", 256);
    kv_ = MakeKv(blocks_, block_size_, config_.max_model_len, caching_);
    scheduler_ = std::make_unique<Scheduler>(config_, kv_.get());
  }

  void Add(const std::string& name, const Args& args) {
    Spec spec;
    const int64_t len = IntArg(args, "prompt", 8);
    if (args.count("max")) spec.max_tokens = IntArg(args, "max", 0);
    spec.stop_after = IntArg(args, "stop_after", 0);
    if (args.count("salt")) spec.salt = args.at("salt");
    int64_t shared = 0;
    if (args.count("prefix")) {
      const std::string value = args.at("prefix");
      const std::string source = value.substr(0, value.find(':'));
      shared = std::stoll(value.substr(value.find(':') + 1));
      const auto& src = specs_.at(source).prompt;
      shared = std::min<int64_t>(shared, static_cast<int64_t>(src.size()));
      spec.prompt.assign(src.begin(), src.begin() + shared);
    }
    for (int64_t i = shared; i < len; ++i) {
      spec.prompt.push_back(static_cast<TokenId>((name[0] * 131 + i * 7 + name.size()) % 1000));
    }
    const RequestId id = static_cast<RequestId>(names_.size() + 1);
    names_[id] = name;
    ids_[name] = id;
    specs_[name] = spec;
    scheduler_->AddRequest({id, spec.prompt, spec.max_tokens, spec.salt});
  }

  static std::vector<SampledToken> Sample(const Scheduler& scheduler,
                                          const SchedulerOutput& out,
                                          const std::map<RequestId, Spec>& specs) {
    std::vector<SampledToken> sampled;
    for (const ScheduledRequest& s : out.scheduled) {
      if (!s.needs_sample) continue;
      const Request* r = scheduler.Find(s.id);
      const TokenId token = NextToken(r->tokens);
      const int64_t stop_after = specs.at(s.id).stop_after;
      sampled.push_back({s.id, token, stop_after > 0 && r->NumOutputTokens() + 1 == stop_after});
    }
    return sampled;
  }

  void Step() {
    std::map<RequestId, Spec> specs;
    for (const auto& [id, name] : names_) specs[id] = specs_[name];
    last_ = scheduler_->Schedule();
    for (const ScheduledRequest& s : last_.scheduled) {
      const int64_t end = s.num_computed_tokens + s.num_scheduled_tokens;
      const int64_t needed = (end + block_size_ - 1) / block_size_;
      if (static_cast<int64_t>(s.block_tables.at(0).size()) < needed) {
        Fail(fmt::format("{}: block table too short", names_[s.id]));
      }
    }
    if (last_.num_scheduled_tokens > config_.max_num_batched_tokens) Fail("over the token budget");
    if (static_cast<int>(scheduler_->running().size()) > config_.max_num_seqs) Fail("too many running");
    const std::vector<SampledToken> sampled = Sample(*scheduler_, last_, specs);
    for (const SampledToken& t : sampled) {  // prompt + outputs, kept after the request ends
      outputs_[names_[t.id]] = scheduler_->Find(t.id)->tokens;
      outputs_[names_[t.id]].push_back(t.token);
    }
    last_finished_ = last_.finished;
    for (const FinishedRequest& f : scheduler_->UpdateFromOutput(last_, sampled)) {
      last_finished_.push_back(f);
    }
    for (const FinishedRequest& f : last_finished_) finished_[names_[f.id]] = f.reason;
    Status integrity = kv_->CheckIntegrity();
    if (!integrity.ok()) Fail(integrity.ToString());
  }

  void RunAll() {
    for (int i = 0; i < 10000 && scheduler_->HasUnfinished(); ++i) Step();
    if (scheduler_->HasUnfinished()) Fail("requests still unfinished after 10000 steps");
  }

  void Abort(const std::string& name) {
    if (!scheduler_->Abort(ids_.at(name))) Fail("abort of unknown request " + name);
    finished_[name] = FinishReason::kAbort;
  }

  std::string Names(const std::vector<RequestId>& ids) {
    std::string s;
    for (RequestId id : ids) s += (s.empty() ? "" : ",") + names_[id];
    return s;
  }

  std::string Describe(const std::string& key);
  void Expect(const Args& args) {
    for (const auto& [key, want] : args) {
      const std::string got = Describe(key);
      if (got != want) Fail(fmt::format("expect {}: want '{}', got '{}'", key, want, got));
    }
  }

  // Output tokens of `name` when it runs alone with room for everything.
  std::vector<TokenId> Solo(const std::string& name) {
    const Spec& spec = specs_.at(name);
    auto kv = MakeKv(1024, block_size_, config_.max_model_len, false);
    SchedulerConfig config = config_;
    config.max_num_batched_tokens = 1 << 20;
    Scheduler scheduler(config, kv.get());
    scheduler.AddRequest({1, spec.prompt, spec.max_tokens, spec.salt});
    std::vector<TokenId> tokens;
    while (scheduler.HasUnfinished()) {
      SchedulerOutput out = scheduler.Schedule();
      std::vector<SampledToken> sampled = Sample(scheduler, out, {{1, spec}});
      if (!sampled.empty()) tokens.push_back(sampled[0].token);
      (void)scheduler.UpdateFromOutput(out, sampled);
    }
    return tokens;
  }

  void ExpectSolo() {
    for (const auto& [name, reason] : finished_) {
      if (reason == FinishReason::kAbort || reason == FinishReason::kError) continue;
      const std::vector<TokenId>& all = outputs_[name];
      const size_t num_prompt = specs_[name].prompt.size();
      std::vector<TokenId> got(all.begin() + std::min(num_prompt, all.size()), all.end());
      if (got != Solo(name)) Fail(fmt::format("{}: output differs from its solo run", name));
    }
  }

  int line_ = 0;
  int64_t blocks_ = 64;
  int block_size_ = 4;
  bool caching_ = true;
  SchedulerConfig config_;
  std::unique_ptr<kv::KvCacheManager> kv_;
  std::unique_ptr<Scheduler> scheduler_;
  std::map<RequestId, std::string> names_;
  std::map<std::string, RequestId> ids_;
  std::map<std::string, Spec> specs_;
  std::map<std::string, std::vector<TokenId>> outputs_;  // prompt + output, latest known
  std::map<std::string, FinishReason> finished_;
  SchedulerOutput last_;
  std::vector<FinishedRequest> last_finished_;
};

// Renders what `expect key=...` compares against.
std::string Trace::Describe(const std::string& key) {
  std::string s;
  auto add = [&](const std::string& part) { s += (s.empty() ? "" : ",") + part; };
  if (key == "scheduled") {
    for (const ScheduledRequest& r : last_.scheduled) {
      add(fmt::format("{}:{}{}", names_[r.id], r.num_scheduled_tokens, r.needs_sample ? "*" : ""));
    }
  } else if (key == "running") {
    return Names(scheduler_->running());
  } else if (key == "waiting") {
    return Names({scheduler_->waiting().begin(), scheduler_->waiting().end()});
  } else if (key == "preempted") {
    return Names(last_.preempted);
  } else if (key == "finished") {
    for (const FinishedRequest& f : last_finished_) {
      add(fmt::format("{}:{}", names_[f.id], FinishReasonName(f.reason)));
    }
  } else if (key == "final") {
    for (const auto& [name, reason] : finished_) add(fmt::format("{}:{}", name, FinishReasonName(reason)));
  } else if (key == "free_blocks") {
    return std::to_string(kv_->pool(0).NumFreeBlocks());
  } else if (key == "tokens") {
    return std::to_string(last_.num_scheduled_tokens);
  } else if (key == "preemptions") {
    return std::to_string(scheduler_->Stats().num_preemptions);
  } else if (key == "out" || key == "computed" || key == "hit") {
    for (const auto& [id, name] : names_) {
      const Request* r = scheduler_->Find(id);
      if (r == nullptr) continue;
      const int64_t value = key == "out" ? r->NumOutputTokens()
                            : key == "computed" ? r->num_computed_tokens
                                                : r->num_cached_tokens;
      add(fmt::format("{}:{}", name, value));
    }
  } else {
    Fail("unknown expect key " + key);
  }
  return s;
}

}  // namespace

std::vector<std::string> RunTrace(const std::string& script) {
  Trace trace;
  trace.Run(script);
  return trace.failures;
}

}  // namespace kvserve::scheduler::testing
