// pbtxt.cc -- config.pbtxt through protobuf's own TextFormat parser, and
// a load request's JSON configuration through its JSON parser: the text
// into a generated inference::ModelConfig (config/model_config.proto),
// then copied field by field into the plain cfg_triton_t of triton.h. The
// only C++ of config/; no exception leaves it (protobuf reports parse
// errors through an ErrorCollector, and this file is built without
// exceptions).
#include "config/triton.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/text_format.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <string>

#include "common/error.h"
#include "config/model_config.pb.h"

namespace {

// Keeps the first error, with its place (protobuf counts lines and columns
// from 0).
class FirstError : public google::protobuf::io::ErrorCollector {
  public:
    FirstError(const char *text, size_t len) : src_(text), len_(len) {}

    // protobuf's message names the field only for an unknown one; the line
    // quoted ("near 'max_batch_size: \"eight\"'") names it for the others.
    void AddError(int line, int column, const std::string &message) override
    {
        if (have_)
            return;
        have_ = true;
        size_t at = 0;
        for (int l = 0; l < line && at < len_; at++)
            if (src_[at] == '\n')
                l++;
        while (at < len_ && (src_[at] == ' ' || src_[at] == '\t'))
            at++;
        size_t end = at;
        while (end < len_ && src_[end] != '\n' && src_[end] != '\r' && end - at < 60)
            end++;
        std::string near;
        for (size_t i = at; i < end; i++)
            near += (src_[i] >= 0x20 && src_[i] < 0x7f) ? src_[i] : '?';
        std::string what = message;
        if (!what.empty() && what.back() == '.')
            what.pop_back();
        std::snprintf(text_, sizeof text_, "line %d, column %d: %s%s%s%s", line + 1, column + 1,
                      what.c_str(), near.empty() ? "" : ", near '", near.c_str(),
                      near.empty() ? "" : "'");
    }
    void AddWarning(int, int, const std::string &) override {}
    bool have() const { return have_; }
    const char *text() const { return text_; }

  private:
    const char *src_;
    size_t len_;
    bool have_ = false;
    char text_[FS_ERRMSG_MAX / 2] = "";
};

int text_copy(char *dst, const std::string &src, const char *origin, const char *field)
{
    if (src.size() >= CFG_TRITON_TEXT_MAX)
        return fs_err(FS_EINVAL, "%s: %s: %zu bytes, more than the %d flatserve holds", origin,
                      field, src.size(), CFG_TRITON_TEXT_MAX - 1);
    if (src.find('\0') != std::string::npos)
        return fs_err(FS_EINVAL, "%s: %s holds a NUL byte", origin, field);
    std::memcpy(dst, src.data(), src.size());
    dst[src.size()] = '\0';
    return 0;
}

template <typename List>
int list_check(const List &l, size_t max, const char *origin, const char *field)
{
    if (static_cast<size_t>(l.size()) > max)
        return fs_err(FS_EINVAL, "%s: %s has %zu entries, more than the %zu flatserve reads",
                      origin, field, static_cast<size_t>(l.size()), max);
    return 0;
}

template <typename Io>
int io_copy(const Io &in, cfg_triton_io_t *out, const char *origin, const char *field)
{
    char path[96];
    std::snprintf(path, sizeof path, "%s \"%.40s\": name", field, in.name().c_str());
    int rc = text_copy(out->name, in.name(), origin, path);
    std::snprintf(path, sizeof path, "%s \"%.40s\": dims", field, in.name().c_str());
    if (rc == 0)
        rc = list_check(in.dims(), CFG_TRITON_MAX_DIMS, origin, path);
    if (rc != 0)
        return rc;
    out->data_type = in.data_type();
    out->has_reshape = in.has_reshape();
    out->n_dims = static_cast<size_t>(in.dims_size());
    for (int d = 0; d < in.dims_size(); d++)
        out->dims[d] = in.dims(d);
    return 0;
}

int sequence_copy(const inference::ModelSequenceBatching &sb, const char *origin,
                  cfg_triton_t *out)
{
    using Control = inference::ModelSequenceBatching::Control;
    int rc = list_check(sb.control_input(), CFG_TRITON_MAX_CONTROLS, origin,
                        "sequence_batching.control_input");
    if (rc == 0)
        rc = list_check(sb.state(), CFG_TRITON_MAX_STATES, origin, "sequence_batching.state");
    if (rc != 0)
        return rc;
    out->sequence_batching = true;
    out->seq_idle_us = sb.max_sequence_idle_microseconds();
    out->n_seq_controls = static_cast<size_t>(sb.control_input_size());
    for (int i = 0; i < sb.control_input_size(); i++) {
        const auto &ci = sb.control_input(i);
        cfg_triton_control_t *c = &out->seq_controls[i];
        if ((rc = text_copy(c->name, ci.name(), origin, "sequence_batching.control_input.name")))
            return rc;
        c->n_controls = static_cast<size_t>(ci.control_size());
        if (ci.control_size() < 1)
            continue;
        const Control &k = ci.control(0);
        c->kind = k.kind();
        c->data_type = k.data_type();
        int lists = (k.int32_false_true_size() > 0) + (k.fp32_false_true_size() > 0) +
                    (k.bool_false_true_size() > 0);
        if (lists > 1) {
            c->values_type = -1;
        } else if (k.int32_false_true_size() > 0) {
            c->values_type = CFG_TRITON_TYPE_INT32;
            c->n_values = static_cast<size_t>(k.int32_false_true_size());
            for (int v = 0; v < 2 && v < k.int32_false_true_size(); v++)
                c->values[v] = k.int32_false_true(v);
        } else if (k.fp32_false_true_size() > 0) {
            c->values_type = CFG_TRITON_TYPE_FP32;
            c->n_values = static_cast<size_t>(k.fp32_false_true_size());
            for (int v = 0; v < 2 && v < k.fp32_false_true_size(); v++)
                c->values[v] = k.fp32_false_true(v);
        } else if (k.bool_false_true_size() > 0) {
            c->values_type = CFG_TRITON_TYPE_BOOL;
            c->n_values = static_cast<size_t>(k.bool_false_true_size());
            for (int v = 0; v < 2 && v < k.bool_false_true_size(); v++)
                c->values[v] = k.bool_false_true(v) ? 1 : 0;
        }
    }
    out->n_seq_states = static_cast<size_t>(sb.state_size());
    for (int i = 0; i < sb.state_size(); i++) {
        const auto &st = sb.state(i);
        cfg_triton_state_t *o = &out->seq_states[i];
        if ((rc = text_copy(o->input_name, st.input_name(), origin,
                            "sequence_batching.state.input_name")) ||
            (rc = text_copy(o->output_name, st.output_name(), origin,
                            "sequence_batching.state.output_name")) ||
            (rc = list_check(st.dims(), CFG_TRITON_MAX_DIMS, origin,
                             "sequence_batching.state.dims")))
            return rc;
        o->data_type = st.data_type();
        o->n_dims = static_cast<size_t>(st.dims_size());
        for (int d = 0; d < st.dims_size(); d++)
            o->dims[d] = st.dims(d);
    }
    if (sb.has_direct()) {
        out->seq_strategy = CFG_TRITON_STRATEGY_DIRECT;
        out->seq_delay_us = sb.direct().max_queue_delay_microseconds();
        out->seq_min_slot_utilization = sb.direct().minimum_slot_utilization();
    } else if (sb.has_oldest()) {
        const auto &o = sb.oldest();
        if ((rc = list_check(o.preferred_batch_size(), CFG_TRITON_MAX_LIST, origin,
                             "sequence_batching.oldest.preferred_batch_size")) != 0)
            return rc;
        out->seq_strategy = CFG_TRITON_STRATEGY_OLDEST;
        out->seq_delay_us = o.max_queue_delay_microseconds();
        out->seq_max_candidates = o.max_candidate_sequences();
        out->n_seq_preferred = static_cast<size_t>(o.preferred_batch_size_size());
        for (int i = 0; i < o.preferred_batch_size_size(); i++)
            out->seq_preferred[i] = o.preferred_batch_size(i);
    }
    return 0;
}

int copy(const inference::ModelConfig &m, const char *origin, cfg_triton_t *out)
{
    int rc = text_copy(out->name, m.name(), origin, "name");
    if (rc == 0)
        rc = text_copy(out->platform, m.platform(), origin, "platform");
    if (rc == 0)
        rc = text_copy(out->backend, m.backend(), origin, "backend");
    if (rc == 0)
        rc = text_copy(out->default_model_filename, m.default_model_filename(), origin,
                       "default_model_filename");
    if (rc == 0)
        rc = list_check(m.input(), CFG_TRITON_MAX_IO, origin, "input");
    if (rc == 0)
        rc = list_check(m.output(), CFG_TRITON_MAX_IO, origin, "output");
    if (rc != 0)
        return rc;
    out->max_batch_size = m.max_batch_size();
    out->n_inputs = static_cast<size_t>(m.input_size());
    for (int i = 0; rc == 0 && i < m.input_size(); i++) {
        rc = io_copy(m.input(i), &out->inputs[i], origin, "input");
        out->inputs[i].format = m.input(i).format();
    }
    out->n_outputs = static_cast<size_t>(m.output_size());
    for (int i = 0; rc == 0 && i < m.output_size(); i++)
        rc = io_copy(m.output(i), &out->outputs[i], origin, "output");
    if (rc != 0)
        return rc;

    if ((out->dynamic_batching = m.has_dynamic_batching())) {
        const inference::ModelDynamicBatching &db = m.dynamic_batching();
        if ((rc = list_check(db.preferred_batch_size(), CFG_TRITON_MAX_LIST, origin,
                             "dynamic_batching.preferred_batch_size")) != 0)
            return rc;
        out->max_queue_delay_us = db.max_queue_delay_microseconds();
        out->n_preferred = static_cast<size_t>(db.preferred_batch_size_size());
        for (int i = 0; i < db.preferred_batch_size_size(); i++)
            out->preferred[i] = db.preferred_batch_size(i);
        if ((out->has_queue_policy = db.has_default_queue_policy())) {
            const inference::ModelQueuePolicy &q = db.default_queue_policy();
            out->timeout_action = q.timeout_action();
            out->default_timeout_us = q.default_timeout_microseconds();
            out->allow_timeout_override = q.allow_timeout_override();
            out->max_queue_size = q.max_queue_size();
        }
    }

    if (m.has_sequence_batching() && (rc = sequence_copy(m.sequence_batching(), origin, out)) != 0)
        return rc;

    out->n_groups = static_cast<size_t>(m.instance_group_size());
    if (m.instance_group_size() > 0) {
        const inference::ModelInstanceGroup &g = m.instance_group(0);
        if ((rc = list_check(g.gpus(), CFG_TRITON_MAX_LIST, origin, "instance_group.gpus")) != 0)
            return rc;
        out->count = g.count();
        out->kind = g.kind();
        out->n_gpus = static_cast<size_t>(g.gpus_size());
        for (int i = 0; i < g.gpus_size(); i++)
            out->gpus[i] = g.gpus(i);
    }

    if (m.has_version_policy()) {
        const inference::ModelVersionPolicy &vp = m.version_policy();
        if (vp.has_latest()) {
            out->versions = CFG_TRITON_VERSIONS_LATEST;
            out->latest_n = vp.latest().num_versions();
        } else if (vp.has_all()) {
            out->versions = CFG_TRITON_VERSIONS_ALL;
        } else if (vp.has_specific()) {
            if ((rc = list_check(vp.specific().versions(), CFG_TRITON_MAX_LIST, origin,
                                 "version_policy.specific.versions")) != 0)
                return rc;
            out->versions = CFG_TRITON_VERSIONS_SPECIFIC;
            out->n_versions = static_cast<size_t>(vp.specific().versions_size());
            for (int i = 0; i < vp.specific().versions_size(); i++)
                out->specific[i] = vp.specific().versions(i);
        }
    }

    if ((rc = list_check(m.parameters(), CFG_TRITON_MAX_LIST, origin, "parameters")) != 0)
        return rc;
    for (const auto &kv : m.parameters()) {
        size_t i = out->n_params++;
        char path[96];
        std::snprintf(path, sizeof path, "parameters \"%.40s\"", kv.first.c_str());
        if ((rc = text_copy(out->params[i].key, kv.first, origin, "parameters key")) != 0 ||
            (rc = text_copy(out->params[i].value, kv.second.string_value(), origin, path)) != 0)
            return rc;
    }
    // protobuf's map iterates in no fixed order: sorted, an error names the
    // same key every time.
    std::sort(out->params, out->params + out->n_params,
              [](const auto &a, const auto &b) { return std::strcmp(a.key, b.key) < 0; });
    return 0;
}

}  // namespace

extern "C" int cfg_triton_parse(const char *text, size_t len, const char *origin,
                                cfg_triton_t *out)
{
    std::memset(out, 0, sizeof *out);
    if (!origin)
        origin = "config.pbtxt";
    if (len > static_cast<size_t>(INT_MAX))
        return fs_err(FS_EINVAL, "%s: %zu bytes is too large", origin, len);
    inference::ModelConfig m;
    google::protobuf::TextFormat::Parser parser;
    FirstError errors(text, len);
    parser.RecordErrorsTo(&errors);
    google::protobuf::io::ArrayInputStream in(text, static_cast<int>(len));
    if (!parser.Parse(&in, &m))
        return fs_err(FS_EPARSE, "%s: %s%s", origin,
                      errors.have() ? errors.text() : "not a ModelConfig in protobuf text format",
                      std::strstr(errors.text(), "has no field named")
                          ? " (flatserve reads a subset of Triton's ModelConfig: see "
                            "config/README.md)"
                          : "");
    return copy(m, origin, out);
}

extern "C" int cfg_triton_parse_json(const char *text, size_t len, const char *origin,
                                     cfg_triton_t *out)
{
    std::memset(out, 0, sizeof *out);
    if (!origin)
        origin = "config";
    inference::ModelConfig m;
    // Unknown fields are refused (the default), as the text parser refuses
    // them: a field flatserve does not read is never dropped.
    google::protobuf::util::JsonParseOptions opts;
    auto st = google::protobuf::util::JsonStringToMessage(
        google::protobuf::StringPiece(text, len), &m, opts);
    if (!st.ok()) {
        // Its first line: the rest quotes the text with a caret under the place.
        std::string why(st.message().data(), st.message().size());
        why = why.substr(0, why.find('\n'));
        if (!why.empty() && why.back() == '.')
            why.pop_back();
        return fs_err(FS_EPARSE, "%s: not a ModelConfig in JSON: %.200s%s", origin, why.c_str(),
                      why.find("Cannot find field") != std::string::npos
                          ? " (flatserve reads a subset of Triton's ModelConfig: see "
                            "config/README.md)"
                          : "");
    }
    return copy(m, origin, out);
}
