// Expanding `sweep:` grids. A sweep axis is a key path into the scenario document
// (`wan[*].bandwidth`, `compression.wan_activations`, `clusters[1].nodes`) and a list of
// values; every combination becomes one scenario document.
#include <cstdint>
#include <string>
#include <vector>

#include "core/limits.hpp"
#include "core/scenario.hpp"

namespace hgsim::core {
namespace {

struct Segment {
  std::string key;
  enum class Index { none, one, all } index = Index::none;
  std::size_t position = 0;
};

std::optional<std::vector<Segment>> split_path(const std::string& path) {
  std::vector<Segment> out;
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t dot = path.find('.', start);
    std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    Segment seg;
    std::size_t bracket = part.find('[');
    seg.key = part.substr(0, bracket);
    if (seg.key.empty()) return std::nullopt;
    if (bracket != std::string::npos) {
      if (part.back() != ']') return std::nullopt;
      std::string inside = part.substr(bracket + 1, part.size() - bracket - 2);
      if (inside == "*") {
        seg.index = Segment::Index::all;
      } else {
        if (inside.empty() || inside.find_first_not_of("0123456789") != std::string::npos)
          return std::nullopt;
        seg.index = Segment::Index::one;
        seg.position = std::stoul(inside);
      }
    }
    out.push_back(seg);
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return out;
}

// Sets every node that `segments[i..]` names under `n` to `value`. Missing mapping keys
// are created (a sweep may set a key the base scenario leaves at its default).
bool apply(Node& n, const std::vector<Segment>& segments, std::size_t i, const Node& value,
           std::string& why) {
  const Segment& seg = segments[i];
  if (!n.is_mapping()) {
    if (!n.is_null()) {
      why = "'" + seg.key + "' is looked up in something that is not a mapping";
      return false;
    }
    n.kind = Node::Kind::mapping;
  }
  Node* child = n.find(seg.key);
  if (child == nullptr) {
    if (seg.index != Segment::Index::none) {
      why = "the scenario has no list '" + seg.key + "'";
      return false;
    }
    n.entries.emplace_back(seg.key, Node{});
    n.key_locations.push_back(value.where);
    child = &n.entries.back().second;
  }
  std::vector<Node*> targets;
  if (seg.index == Segment::Index::none) {
    targets.push_back(child);
  } else if (!child->is_sequence()) {
    why = "'" + seg.key + "' is not a list";
    return false;
  } else if (seg.index == Segment::Index::all) {
    for (Node& item : child->items) targets.push_back(&item);
  } else if (seg.position < child->items.size()) {
    targets.push_back(&child->items[seg.position]);
  } else {
    why = "'" + seg.key + "' has " + std::to_string(child->items.size()) + " entries, no [" +
          std::to_string(seg.position) + "]";
    return false;
  }
  for (Node* t : targets) {
    if (i + 1 == segments.size()) {
      *t = value;
    } else if (!apply(*t, segments, i + 1, value, why)) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::vector<SweepPoint> sweep_points(const Node& document, Diagnostics& diags) {
  Node base = document;
  const Node* sweep = document.find("sweep");
  if (Node* s = base.find("sweep")) *s = Node{};  // drop the grid from every point
  if (sweep == nullptr || !sweep->is_mapping() || sweep->entries.empty())
    return {SweepPoint{{}, base}};

  struct Axis {
    std::string path;
    std::vector<Segment> segments;
    const Node* values;
  };
  std::vector<Axis> axes;
  for (std::size_t i = 0; i < sweep->entries.size(); ++i) {
    const auto& [path, values] = sweep->entries[i];
    auto segments = split_path(path);
    std::string key_path = child_path("sweep", path);
    if (!segments) {
      diags.error(sweep->key_locations[i], key_path, "'" + path + "' is not a key path",
                  "write keys joined by '.', with [N] or [*] for lists, e.g. wan[*].bandwidth");
      continue;
    }
    if (segments->front().key == "sweep" || segments->front().key == "name") {
      diags.error(sweep->key_locations[i], key_path,
                  "'" + segments->front().key + "' cannot be swept");
      continue;
    }
    if (!values.is_sequence() || values.items.empty()) continue;  // reported by the scenario reader
    Node probe = base;
    std::string why;
    if (!apply(probe, *segments, 0, values.items.front(), why)) {
      diags.error(sweep->key_locations[i], key_path, "cannot sweep '" + path + "': " + why);
      continue;
    }
    axes.push_back({path, *segments, &values});
  }

  // The grid's size before any point is made: a product of a few long lists is huge.
  const std::int64_t limit = limits().sweep_points;
  std::int64_t count = 1;
  for (const Axis& axis : axes)
    count = checked_mul(count, static_cast<std::int64_t>(axis.values->items.size()))
                .value_or(INT64_MAX);
  if (count > limit) {
    std::string product;
    for (const Axis& axis : axes)
      product += (product.empty() ? "" : " x ") + std::to_string(axis.values->items.size());
    diags.error(sweep->where, "sweep",
                "the sweep grid has " +
                    (count == INT64_MAX ? std::string("more than 2^63") : std::to_string(count)) +
                    " points (" + product + ")",
                "split the sweep into several files, or " +
                    limit_hint("HGSIM_MAX_SWEEP_POINTS", static_cast<double>(limit)));
    return {SweepPoint{{}, base}};
  }
  std::vector<SweepPoint> points{SweepPoint{{}, base}};
  for (const Axis& axis : axes) {
    std::vector<SweepPoint> next;
    for (const SweepPoint& point : points) {
      for (const Node& value : axis.values->items) {
        SweepPoint p = point;
        std::string why;
        apply(p.document, axis.segments, 0, value, why);
        p.settings.emplace_back(axis.path, to_json(value).dump());
        next.push_back(std::move(p));
      }
    }
    points = std::move(next);
  }
  return points;
}

}  // namespace hgsim::core
