#include "apps/point_choice.hpp"

#include <limits>

#include "planner/planner.hpp"
#include "sim/resolved_plan.hpp"

namespace hgsim::apps {

using core::Json;

PointChoice point_choice(const core::Plan& plan) {
  return {planner::describe(plan), sim::used_gpus(plan), sim::used_gpus_per_cluster(plan)};
}

Json choice_to_json(const PointChoice& choice) {
  Json clusters = Json::array();
  for (const auto& [cluster, gpus] : choice.gpus_per_cluster)
    clusters.push_back({{"cluster", cluster}, {"gpus", gpus}});
  return {{"plan", choice.plan}, {"gpus_used", choice.gpus_used}, {"gpus_per_cluster", clusters}};
}

std::optional<PointChoice> choice_from_json(const Json& j) {
  auto whole = [](const Json& v) {
    return v.is_number_integer() && v.get<long long>() >= 0 &&
           v.get<long long>() <= std::numeric_limits<int>::max();
  };
  if (!j.is_object() || !j.contains("plan") || !j["plan"].is_string() || !j.contains("gpus_used") ||
      !whole(j["gpus_used"]) || !j.contains("gpus_per_cluster") ||
      !j["gpus_per_cluster"].is_array())
    return std::nullopt;
  PointChoice choice{j["plan"].get<std::string>(), j["gpus_used"].get<int>(), {}};
  for (const Json& c : j["gpus_per_cluster"]) {
    if (!c.is_object() || !c.contains("cluster") || !c["cluster"].is_string() ||
        !c.contains("gpus") || !whole(c["gpus"]))
      return std::nullopt;
    choice.gpus_per_cluster.emplace_back(c["cluster"].get<std::string>(), c["gpus"].get<int>());
  }
  return choice;
}

std::string gpus_per_cluster_text(const PointChoice& choice) {
  std::string out;
  for (const auto& [cluster, gpus] : choice.gpus_per_cluster)
    out += (out.empty() ? "" : ", ") + cluster + " " + std::to_string(gpus);
  return out;
}

std::string choice_text(const PointChoice& choice) {
  return std::to_string(choice.gpus_used) + " GPU" + (choice.gpus_used == 1 ? "" : "s") + " (" +
         gpus_per_cluster_text(choice) + "); " + choice.plan;
}

std::optional<PointChoice> recorded_choice(const PointRow& row) {
  if (row.status != "ok") return std::nullopt;
  try {
    if (!row.choice.empty()) return choice_from_json(Json::parse(row.choice));
    if (row.plan.empty()) return std::nullopt;
    core::Diagnostics diags;
    const auto plan = core::parse_plan(core::from_json(Json::parse(row.plan)), "plan", diags);
    if (!plan || diags.has_errors()) return std::nullopt;
    return point_choice(*plan);
  } catch (const Json::exception&) {
    return std::nullopt;
  }
}

std::string point_choice_text(const PointRow& row) {
  if (row.status != "ok") return "";
  const auto choice = recorded_choice(row);
  return choice ? choice_text(*choice) : kPlanNotRecorded;
}

Json choice_json(const PointRow& row) {
  const auto choice = recorded_choice(row);
  return choice ? choice_to_json(*choice) : Json(nullptr);
}

}  // namespace hgsim::apps
