// Integer environment variables, parsed strictly (see depengine/env.h).
#include "depengine/env.h"

#include <charconv>
#include <cstdlib>
#include <string>

namespace depengine {

long env_long(const char* name, long lo, long hi, long fallback) {
  const char* text = std::getenv(name);
  if (!text || !*text) return fallback;
  long value = 0;
  const char* end = text + std::char_traits<char>::length(text);
  auto [ptr, ec] = std::from_chars(text, end, value);
  if (ec != std::errc() || ptr != end || value < lo || value > hi) {
    throw EnvError(std::string(name) + "='" + text + "' is not an integer in [" +
                   std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return value;
}

}  // namespace depengine
