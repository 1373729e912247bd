#include "offload/config.h"

#include <fmt/format.h>

#include <charconv>
#include <initializer_list>
#include <nlohmann/json.hpp>

#include "core/units.h"

namespace kvserve::offload {
namespace {

using Json = nlohmann::json;

Status CheckKeys(const Json& object, std::string_view where,
                 std::initializer_list<std::string_view> allowed) {
  for (const auto& [key, value] : object.items()) {
    bool known = false;
    for (std::string_view a : allowed) known = known || key == a;
    if (!known) {
      std::string list;
      for (std::string_view a : allowed) list += fmt::format("{}{}", list.empty() ? "" : ", ", a);
      return InvalidArgument(
          fmt::format("{}: unknown key '{}' (expected one of: {})", where, key, list));
    }
  }
  return Status::Ok();
}

Result<std::string> GetString(const Json& object, std::string_view where, const char* key) {
  const Json& v = object.at(key);
  if (!v.is_string()) return InvalidArgument(fmt::format("{}.{} must be a string", where, key));
  return v.get<std::string>();
}

Result<int> GetPositiveInt(const Json& object, std::string_view where, const char* key,
                           int max_value) {
  const Json& v = object.at(key);
  if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > max_value) {
    return InvalidArgument(
        fmt::format("{}.{} must be an integer in [1, {}], got {}", where, key, max_value,
                    v.dump()));
  }
  return static_cast<int>(v.get<int64_t>());
}

Result<uint64_t> GetBytes(const Json& v, std::string_view where) {
  if (v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0)) {
    return v.get<uint64_t>();
  }
  if (v.is_number_float() && v.get<double>() >= 0) return static_cast<uint64_t>(v.get<double>());
  if (v.is_string()) {
    Result<uint64_t> bytes = ParseBytes(v.get<std::string>());
    if (bytes.ok()) return bytes;
    return bytes.status().WithContext(std::string(where));
  }
  return InvalidArgument(fmt::format("{} must be a byte count or a size like \"8GiB\", got {}",
                                     where, v.dump()));
}

Result<FileTierConfig> ParseFileTier(const Json& tier, const std::string& where) {
  KV_RETURN_IF_ERROR(CheckKeys(tier, where, {"type", "root_dir", "n_read_threads",
                                             "n_write_threads"}));
  FileTierConfig file;
  if (!tier.contains("root_dir")) return InvalidArgument(where + ": root_dir is required");
  KV_ASSIGN_OR_RETURN(file.root_dir, GetString(tier, where, "root_dir"));
  if (file.root_dir.empty()) return InvalidArgument(where + ".root_dir is empty");
  if (tier.contains("n_read_threads")) {
    KV_ASSIGN_OR_RETURN(file.n_read_threads, GetPositiveInt(tier, where, "n_read_threads", 256));
  }
  if (tier.contains("n_write_threads")) {
    KV_ASSIGN_OR_RETURN(file.n_write_threads,
                        GetPositiveInt(tier, where, "n_write_threads", 256));
  }
  return file;
}

Result<RedisTierConfig> ParseRedisTier(const Json& tier, const std::string& where) {
  KV_RETURN_IF_ERROR(CheckKeys(tier, where, {"type", "url"}));
  if (!tier.contains("url")) return InvalidArgument(where + ": url is required");
  RedisTierConfig redis;
  KV_ASSIGN_OR_RETURN(redis.url, GetString(tier, where, "url"));
  Result<RedisAddress> address = ParseRedisUrl(redis.url);
  if (!address.ok()) return address.status().WithContext(where);
  redis.address = *address;
  return redis;
}

Status ParseSecondaryTiers(const Json& tiers, OffloadConfig* config) {
  constexpr std::string_view kWhere = "kv_connector_extra_config.secondary_tiers";
  if (!tiers.is_array()) return InvalidArgument(fmt::format("{} must be a list", kWhere));
  for (size_t i = 0; i < tiers.size(); ++i) {
    const Json& tier = tiers[i];
    const std::string where = fmt::format("{}[{}]", kWhere, i);
    if (!tier.is_object()) return InvalidArgument(where + " must be an object");
    if (!tier.contains("type")) return InvalidArgument(where + ": type is required");
    KV_ASSIGN_OR_RETURN(std::string type, GetString(tier, where, "type"));
    if (type == "fs") {
      if (config->file) return InvalidArgument(where + ": more than one fs tier");
      KV_ASSIGN_OR_RETURN(config->file, ParseFileTier(tier, where));
    } else if (type == "redis") {
      if (config->redis) return InvalidArgument(where + ": more than one redis tier");
      KV_ASSIGN_OR_RETURN(config->redis, ParseRedisTier(tier, where));
    } else {
      return InvalidArgument(
          fmt::format("{}.type '{}' is not a tier type (expected fs or redis)", where, type));
    }
  }
  return Status::Ok();
}

Status ParseExtraConfig(const Json& extra, OffloadConfig* config) {
  constexpr std::string_view kWhere = "kv_connector_extra_config";
  if (!extra.is_object()) return InvalidArgument(fmt::format("{} must be an object", kWhere));
  KV_RETURN_IF_ERROR(CheckKeys(extra, kWhere, {"spec_name", "cpu_bytes_to_use",
                                               "blocks_per_chunk", "eviction_policy",
                                               "secondary_tiers"}));
  if (extra.contains("spec_name")) {
    KV_ASSIGN_OR_RETURN(config->spec_name, GetString(extra, kWhere, "spec_name"));
    if (config->spec_name != "CPUOffloadingSpec" && config->spec_name != "TieringOffloadingSpec") {
      return InvalidArgument(fmt::format(
          "{}.spec_name '{}' is not supported (expected CPUOffloadingSpec or "
          "TieringOffloadingSpec)", kWhere, config->spec_name));
    }
  }
  if (!extra.contains("cpu_bytes_to_use")) {
    return InvalidArgument(fmt::format("{}: cpu_bytes_to_use is required", kWhere));
  }
  KV_ASSIGN_OR_RETURN(config->cpu_bytes_to_use,
                      GetBytes(extra.at("cpu_bytes_to_use"), "cpu_bytes_to_use"));
  if (extra.contains("blocks_per_chunk")) {
    KV_ASSIGN_OR_RETURN(config->blocks_per_chunk,
                        GetPositiveInt(extra, kWhere, "blocks_per_chunk", 1 << 16));
    if (config->blocks_per_chunk != 1) {
      return InvalidArgument(fmt::format(
          "{}.blocks_per_chunk {}: only 1 is supported", kWhere, config->blocks_per_chunk));
    }
  }
  if (extra.contains("eviction_policy")) {
    KV_ASSIGN_OR_RETURN(config->eviction_policy, GetString(extra, kWhere, "eviction_policy"));
    if (config->eviction_policy != "lru") {
      return InvalidArgument(fmt::format("{}.eviction_policy '{}' is not supported (expected lru)",
                                         kWhere, config->eviction_policy));
    }
  }
  if (extra.contains("secondary_tiers")) {
    KV_RETURN_IF_ERROR(ParseSecondaryTiers(extra.at("secondary_tiers"), config));
  }
  if ((config->file || config->redis) && config->spec_name != "TieringOffloadingSpec") {
    return InvalidArgument(fmt::format(
        "{}.secondary_tiers needs spec_name TieringOffloadingSpec (got {})", kWhere,
        config->spec_name));
  }
  return Status::Ok();
}

}  // namespace

std::string OffloadConfig::Describe() const {
  std::string out = fmt::format("cpu {}", FormatBytes(cpu_bytes_to_use));
  if (file) {
    out += fmt::format(" -> fs {} ({} read / {} write threads)", file->root_dir,
                       file->n_read_threads, file->n_write_threads);
  }
  if (redis) out += fmt::format(" -> redis {}:{}", redis->address.host, redis->address.port);
  return out;
}

Result<OffloadConfig> ParseKvTransferConfig(std::string_view json_text) {
  Json root = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return InvalidArgument("--kv-transfer-config is not valid JSON");
  if (!root.is_object()) return InvalidArgument("--kv-transfer-config must be a JSON object");
  KV_RETURN_IF_ERROR(CheckKeys(root, "--kv-transfer-config",
                               {"kv_connector", "kv_role", "kv_connector_extra_config"}));
  if (!root.contains("kv_connector")) {
    return InvalidArgument("--kv-transfer-config: kv_connector is required");
  }
  KV_ASSIGN_OR_RETURN(std::string connector,
                      GetString(root, "--kv-transfer-config", "kv_connector"));
  if (connector != "OffloadingConnector") {
    return InvalidArgument(fmt::format(
        "--kv-transfer-config: kv_connector '{}' is not supported (expected OffloadingConnector)",
        connector));
  }
  if (root.contains("kv_role")) {
    KV_ASSIGN_OR_RETURN(std::string role, GetString(root, "--kv-transfer-config", "kv_role"));
    if (role != "kv_both") {
      return InvalidArgument(
          fmt::format("--kv-transfer-config: kv_role '{}' is not supported (expected kv_both)",
                      role));
    }
  }
  if (!root.contains("kv_connector_extra_config")) {
    return InvalidArgument("--kv-transfer-config: kv_connector_extra_config is required");
  }
  OffloadConfig config;
  KV_RETURN_IF_ERROR(ParseExtraConfig(root.at("kv_connector_extra_config"), &config));
  return config;
}

Result<OffloadConfig> OffloadConfigFromSize(std::string_view gib) {
  double value = 0;
  auto [ptr, ec] = std::from_chars(gib.data(), gib.data() + gib.size(), value);
  if (ec != std::errc() || ptr != gib.data() + gib.size() || !(value > 0) || value > 1 << 20) {
    return InvalidArgument(
        fmt::format("--kv-offloading-size '{}' must be a positive number of GiB", gib));
  }
  OffloadConfig config;
  config.cpu_bytes_to_use = static_cast<uint64_t>(value * static_cast<double>(kGiB));
  return config;
}

}  // namespace kvserve::offload
