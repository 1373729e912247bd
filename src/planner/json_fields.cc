#include "planner/json_fields.h"

namespace kvserve::planner {

Result<Json> ParseJsonText(std::string_view text, std::string_view what) {
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false,
                       /*ignore_comments=*/true);
  if (j.is_discarded()) return InvalidArgument(fmt::format("{}: not valid JSON", what));
  return j;
}

Result<double> NumberField(const Json& obj, const char* key, std::optional<double> fallback,
                           bool positive) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    if (fallback) return *fallback;
    return InvalidArgument(fmt::format("missing field '{}'", key));
  }
  if (!it->is_number()) return InvalidArgument(fmt::format("field '{}' must be a number", key));
  const double v = it->get<double>();
  if (positive && !(v > 0)) {
    return InvalidArgument(fmt::format("field '{}' must be positive, got {}", key, v));
  }
  return v;
}

Result<int64_t> IntField(const Json& obj, const char* key, std::optional<int64_t> fallback) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    if (fallback) return *fallback;
    return InvalidArgument(fmt::format("missing field '{}'", key));
  }
  if (!it->is_number_integer()) {
    return InvalidArgument(fmt::format("field '{}' must be an integer", key));
  }
  return it->get<int64_t>();
}

Result<std::string> StringField(const Json& obj, const char* key,
                                std::optional<std::string> fallback) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    if (fallback) return *fallback;
    return InvalidArgument(fmt::format("missing field '{}'", key));
  }
  if (!it->is_string()) return InvalidArgument(fmt::format("field '{}' must be a string", key));
  return it->get<std::string>();
}

Result<bool> BoolField(const Json& obj, const char* key, bool fallback) {
  auto it = obj.find(key);
  if (it == obj.end()) return fallback;
  if (!it->is_boolean()) return InvalidArgument(fmt::format("field '{}' must be true or false", key));
  return it->get<bool>();
}

}  // namespace kvserve::planner
