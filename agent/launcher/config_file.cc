#include "agent/launcher/config_file.h"

#include <yaml-cpp/yaml.h>

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/cli/command_line.h"

namespace troika::agent {
namespace {

constexpr char kProgram[] = "troikarun";

// A key of a section and the flag it sets; `off` set: a switch, `flag` for true, `off` for
// false.
struct Key {
  const char* name;
  const char* flag;
  const char* off = nullptr;
};

struct Section {
  const char* name;
  std::vector<Key> keys;
  // The flag the section sets when present without an `enabled` key (horovodrun's defaults:
  // autotune off, the stall check on).
  const char* without_enabled = nullptr;
};

const std::vector<Section>& Sections() {
  static const auto* sections = new std::vector<Section>{
      {"params",
       {{"fusion_threshold_mb", "fusion_threshold_mb"},
        {"cycle_time_ms", "cycle_time_ms"},
        {"cache_capacity", "cache_capacity"},
        {"hierarchical_allreduce", "hierarchical_allreduce", "no_hierarchical_allreduce"},
        {"hierarchical_allgather", "hierarchical_allgather", "no_hierarchical_allgather"},
        {"torus_allreduce", "torus_allreduce", "no_torus_allreduce"}}},
      {"autotune",
       {{"enabled", "autotune", "no_autotune"},
        {"log_file", "autotune_log_file"},
        {"warmup_samples", "autotune_warmup_samples"},
        {"steps_per_sample", "autotune_steps_per_sample"},
        {"bayes_opt_max_samples", "autotune_bayes_opt_max_samples"},
        {"gaussian_process_noise", "autotune_gaussian_process_noise"}},
       "no_autotune"},
      {"timeline",
       {{"filename", "timeline_filename"},
        {"mark_cycles", "timeline_mark_cycles", "no_timeline_mark_cycles"}}},
      {"stall_check",
       {{"enabled", "stall_check", "no_stall_check"},
        {"warning_time_seconds", "stall_check_warning_time_seconds"},
        {"shutdown_time_seconds", "stall_check_shutdown_time_seconds"}},
       "stall_check"},
      {"library_options",
       {{"mpi_threads_disable", "mpi_threads_disable", "no_mpi_threads_disable"},
        {"num_nccl_streams", "num_nccl_streams"},
        {"thread_affinity", "thread_affinity"},
        {"gloo_timeout_seconds", "gloo_timeout_seconds"}}},
      {"logging",
       {{"level", "log_level"}, {"with_timestamp", "log_with_timestamp", "log_without_timestamp"}}},
  };
  return *sections;
}

class Reader {
 public:
  explicit Reader(const std::string& file) : file_(file) {}

  absl::Status Error(const std::string& message) const {
    return UsageError(kProgram, absl::StrCat("--config-file ", file_, ": ", message));
  }

  // The settings of the document `root`.
  absl::StatusOr<std::vector<ConfigSetting>> Read(const YAML::Node& root) {
    if (root.IsNull()) return settings_;
    if (!root.IsMap()) return Error("not a mapping of horovodrun's sections (params: ...)");
    for (const auto& entry : root) {
      const std::string name = entry.first.IsScalar() ? entry.first.Scalar() : "";
      if (absl::Status s = ReadTop(name, entry.second); !s.ok()) return s;
    }
    return settings_;
  }

 private:
  absl::Status ReadTop(const std::string& name, const YAML::Node& value) {
    if (name == "controller") {
      if (value.IsNull()) return absl::OkStatus();
      if (!value.IsScalar()) return Error("controller must be gloo or mpi");
      const std::string controller = absl::AsciiStrToLower(value.Scalar());
      if (controller != "gloo" && controller != "mpi") {
        return Error(absl::StrCat("no such controller '", value.Scalar(), "' (gloo or mpi)"));
      }
      settings_.push_back({"controller", controller, ""});
      return absl::OkStatus();
    }
    for (const Section& section : Sections()) {
      if (name == section.name) return ReadSection(section, value);
    }
    std::vector<std::string> known = {"controller"};
    for (const Section& section : Sections()) known.push_back(section.name);
    return Error(
        absl::StrCat("unknown key '", name, "' (the file takes ", absl::StrJoin(known, ", "), ")"));
  }

  absl::Status ReadSection(const Section& section, const YAML::Node& node) {
    if (node.IsNull()) return absl::OkStatus();  // horovodrun skips an empty section
    if (!node.IsMap()) return Error(absl::StrCat(section.name, " must be a mapping of keys"));
    bool implied = section.without_enabled != nullptr;
    for (const auto& entry : node) {
      const std::string name = entry.first.IsScalar() ? entry.first.Scalar() : "";
      const Key* key = nullptr;
      for (const Key& k : section.keys) key = name == k.name ? &k : key;
      const std::string where = absl::StrCat(section.name, ".", name);
      if (key == nullptr) {
        std::vector<std::string> known;
        for (const Key& k : section.keys) known.push_back(k.name);
        return Error(absl::StrCat("unknown key '", where, "' (", section.name, " takes ",
                                  absl::StrJoin(known, ", "), ")"));
      }
      implied = implied && name != "enabled";
      if (absl::Status s = ReadKey(*key, where, entry.second); !s.ok()) return s;
    }
    if (implied) {
      settings_.push_back({absl::StrCat(section.name, ".enabled"), section.without_enabled, ""});
    }
    return absl::OkStatus();
  }

  absl::Status ReadKey(const Key& key, const std::string& where, const YAML::Node& value) {
    if (value.IsNull()) return absl::OkStatus();  // horovodrun skips a key without a value
    if (!value.IsScalar()) return Error(absl::StrCat(where, " must be a single value"));
    if (key.off == nullptr) {
      settings_.push_back({where, key.flag, value.Scalar()});
      return absl::OkStatus();
    }
    bool on = false;
    if (!YAML::convert<bool>::decode(value, on)) {
      return Error(absl::StrCat(where, ": '", value.Scalar(), "' is not true or false"));
    }
    settings_.push_back({where, on ? key.flag : key.off, ""});
    return absl::OkStatus();
  }

  const std::string file_;
  std::vector<ConfigSetting> settings_;
};

}  // namespace

absl::StatusOr<std::vector<ConfigSetting>> ParseConfigFile(const std::string& yaml,
                                                           const std::string& file) {
  Reader reader(file);
  YAML::Node root;
  // yaml-cpp reports errors as exceptions; none leaves this function.
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::ParserException& e) {
    return reader.Error(absl::StrCat("line ", e.mark.line + 1, ", column ", e.mark.column + 1,
                                     ": not YAML: ", e.msg));
  } catch (const YAML::Exception& e) {
    return reader.Error(absl::StrCat("not YAML: ", e.what()));
  }
  try {
    return reader.Read(root);
  } catch (const YAML::Exception& e) {
    return reader.Error(e.what());
  }
}

absl::StatusOr<std::vector<ConfigSetting>> ReadConfigFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFlagFile(kProgram, "--config-file", path);
  if (!text.ok()) return text.status();
  return ParseConfigFile(*text, path);
}

}  // namespace troika::agent
