// Typed reads of JSON object fields with errors that name the field, for the preset data files
// (planner/presets.h) and the simulator's files (profiles, traces). nlohmann's non-throwing
// calls only.
#pragma once

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace kvserve::planner {

using Json = nlohmann::json;

// Parses JSON with // comments allowed. InvalidArgument naming `what` when malformed.
Result<Json> ParseJsonText(std::string_view text, std::string_view what);

// obj[key] as a number; `fallback` when absent; InvalidArgument when present but not a number
// or, with `positive`, not > 0.
Result<double> NumberField(const Json& obj, const char* key, std::optional<double> fallback,
                           bool positive = false);
// obj[key] as an integer (a JSON integer; 1e3 is not one); `fallback` when absent.
Result<int64_t> IntField(const Json& obj, const char* key, std::optional<int64_t> fallback);
Result<std::string> StringField(const Json& obj, const char* key,
                                std::optional<std::string> fallback);
Result<bool> BoolField(const Json& obj, const char* key, bool fallback);

}  // namespace kvserve::planner
