// Fuzz target: the campaign (calo sweep) spec (see targets.h).
#include <cstdlib>

#include "campaign/campaign.h"
#include "core/config.h"
#include "core/error.h"
#include "targets.h"

namespace calo::fuzz {
int campaign_spec(const uint8_t* data, std::size_t size) {
  try {
    const campaign::Spec spec =
        campaign::parse_spec(core::parse_yaml(text_of(data, size), "fuzz.yaml"), "fuzz.yaml");
    std::vector<campaign::Point> points = campaign::expand_grid(spec);
    for (const campaign::Point& point : points) campaign::point_arguments(spec, point, "sim", "runs/fuzz");
  } catch (const InputError&) {
  }
  return 0;
}

}  // namespace calo::fuzz
