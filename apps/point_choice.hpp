// What a sweep point ran: the plan's description (planner::describe, the one description
// every report prints) and the GPUs it used, in all and per cluster. `hgsim sweep` records
// it with the point (the points table's `choice` column, apps/results_db.hpp); the sweep's
// point lines, `hgsim results` (table, CSV, JSON) and the plots (through the Python module's
// point_choice) show it, so that two settings drawn on top of each other say which plans
// they ran.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "apps/results_db.hpp"
#include "core/document.hpp"
#include "core/scenario.hpp"

namespace hgsim::apps {

struct PointChoice {
  std::string plan;  // planner::describe
  int gpus_used = 0;
  std::vector<std::pair<std::string, int>> gpus_per_cluster;  // in the plan's order
};

// What a point that ran `plan` chose.
PointChoice point_choice(const core::Plan& plan);

// {"plan": "...", "gpus_used": 8, "gpus_per_cluster": [{"cluster": "a", "gpus": 4}, ...]}
// (a list: the plan's order survives the round trip).
core::Json choice_to_json(const PointChoice& choice);
// The choice of that form; nullopt for anything else.
std::optional<PointChoice> choice_from_json(const core::Json& j);

// "a 4, b 4"
std::string gpus_per_cluster_text(const PointChoice& choice);
// "8 GPUs (a 4, b 4); <the plan's description>"
std::string choice_text(const PointChoice& choice);

// What an ok point of a table says when its row records no choice.
inline constexpr const char* kPlanNotRecorded = "plan not recorded";

// What a row of the database says its point ran: the recorded choice; for a row of an
// older database (written before the choice column), the choice of its stored plan when
// that still reads as a plan; nullopt for a failed point or neither.
std::optional<PointChoice> recorded_choice(const PointRow& row);
// recorded_choice as the tables print it: choice_text, kPlanNotRecorded for an ok point
// without one, "" for a failed point.
std::string point_choice_text(const PointRow& row);
// recorded_choice as JSON prints it: choice_to_json, null for none.
core::Json choice_json(const PointRow& row);

}  // namespace hgsim::apps
