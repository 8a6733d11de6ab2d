// Fuzz target: the model YAML loader (see targets.h).
#include <cstdlib>

#include "core/config.h"
#include "core/error.h"
#include "model/model_spec.h"
#include "targets.h"

namespace calo::fuzz {
int model_yaml(const uint8_t* data, std::size_t size) {
  try {
    const model::ModelSpec spec =
        model::parse_model_spec(core::parse_yaml(text_of(data, size), "fuzz.yaml"), "fuzz.yaml");
    const model::ModelSpec again = model::parse_model_spec(model::to_json(spec), "round trip");
    if (model::to_json(again) != model::to_json(spec)) std::abort();  // the JSON form must round-trip
  } catch (const InputError&) {
  }
  return 0;
}

}  // namespace calo::fuzz
