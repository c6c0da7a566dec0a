// pagellm._pagellm: the C++ half of the Python package (python/pagellm holds the vLLM-shaped API).
// It binds the engine's own types; every call that waits on the engine releases the GIL.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstdlib>

#include "core/logging.h"
#include "core/version.h"
#include "io/model_path.h"
#include "python/engine_args.h"
#include "python/offline_engine.h"
#include "python/request_batch.h"
#include "server/generation_defaults.h"

namespace py = pybind11;

namespace pagellm::python {

namespace {

// C++ exceptions for the Python ones pybind11 has no class for; thrown without the GIL, turned
// into Python errors by the translator registered in the module.
struct NotFoundError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct UnimplementedError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// One-line engine errors as the Python exceptions a caller would catch (safe without the GIL).
[[noreturn]] void raise_status(const Status& status) {
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kTooLarge:
      throw py::value_error(status.message());
    case StatusCode::kNotFound:
      throw NotFoundError(status.message());
    case StatusCode::kUnimplemented:
      throw UnimplementedError(status.message());
    default:
      throw std::runtime_error(status.message());
  }
}

void translate_errors() {
  py::register_exception_translator([](std::exception_ptr thrown) {
    try {
      if (thrown) std::rethrow_exception(thrown);
    } catch (const NotFoundError& e) {
      PyErr_SetString(PyExc_FileNotFoundError, e.what());
    } catch (const UnimplementedError& e) {
      PyErr_SetString(PyExc_NotImplementedError, e.what());
    }
  });
}

template <typename T>
T value_or_raise(Expected<T> expected) {
  if (!expected.has_value()) raise_status(expected.status());
  return std::move(expected).value();
}

py::object finish_reason_or_none(const std::optional<FinishReason>& reason) {
  if (!reason) return py::none();
  return py::str(std::string(finish_reason_name(*reason)));
}

// The shared tokenizer, kept alive by whoever holds this handle.
struct TokenizerHandle {
  std::shared_ptr<const Tokenizer> tokenizer;
};

std::unique_ptr<OfflineEngine> load_engine(const std::string& model, const std::string& revision,
                                           const std::vector<std::pair<std::string, py::object>>& keywords) {
  std::vector<EngineArg> args;
  for (const auto& [name, value] : keywords) {
    EngineArg arg;
    arg.name = name;
    if (py::isinstance<py::bool_>(value)) {
      arg.is_bool = true;
      arg.bool_value = value.cast<bool>();
    } else {
      arg.text = py::str(value).cast<std::string>();
    }
    args.push_back(std::move(arg));
  }
  Expected<EngineConfig> config = engine_config_from_args(args);
  if (!config.has_value() && config.status().code() == StatusCode::kNotFound) throw py::type_error(config.status().message());
  EngineConfig engine_config = value_or_raise(std::move(config));
  engine_config.model_dir = value_or_raise(resolve_model_path(model, revision));
  py::gil_scoped_release release;
  return value_or_raise(OfflineEngine::load(engine_config));
}

void bind_sampling(py::module_& m) {
  py::class_<SamplingParams>(m, "SamplingParams", "The engine's sampling parameters (pagellm.SamplingParams fills them)")
      .def(py::init<>())
      .def_readwrite("temperature", &SamplingParams::temperature)
      .def_readwrite("top_p", &SamplingParams::top_p)
      .def_readwrite("top_k", &SamplingParams::top_k)
      .def_readwrite("min_p", &SamplingParams::min_p)
      .def_readwrite("seed", &SamplingParams::seed)
      .def_readwrite("max_tokens", &SamplingParams::max_tokens)
      .def_readwrite("min_tokens", &SamplingParams::min_tokens)
      .def_readwrite("stop_token_ids", &SamplingParams::stop_token_ids)
      .def_readwrite("ignore_eos", &SamplingParams::ignore_eos)
      .def_readwrite("presence_penalty", &SamplingParams::presence_penalty)
      .def_readwrite("frequency_penalty", &SamplingParams::frequency_penalty)
      .def_readwrite("repetition_penalty", &SamplingParams::repetition_penalty)
      .def_readwrite("num_logprobs", &SamplingParams::num_logprobs)
      .def_readwrite("num_prompt_logprobs", &SamplingParams::num_prompt_logprobs)
      .def_readwrite("logit_bias", &SamplingParams::logit_bias)
      .def("validate", [](const SamplingParams& params) {
        if (Status status = params.validate(); !status.is_ok()) raise_status(status);
      });
  py::class_<GenerateRequest>(m, "GenerateRequest")
      .def(py::init<>())
      .def_readwrite("prompt_token_ids", &GenerateRequest::prompt_token_ids)
      .def_readwrite("sampling", &GenerateRequest::sampling)
      .def_readwrite("stop_strings", &GenerateRequest::stop_strings)
      .def_readwrite("skip_special_tokens", &GenerateRequest::skip_special_tokens)
      .def_readwrite("include_stop_string", &GenerateRequest::include_stop_string);
}

void bind_outputs(py::module_& m) {
  py::class_<TokenLogprob>(m, "TokenLogprob")
      .def_readonly("token_id", &TokenLogprob::token_id)
      .def_readonly("logprob", &TokenLogprob::logprob);
  py::class_<SampledLogprobs>(m, "SampledLogprobs")
      .def_readonly("sampled_logprob", &SampledLogprobs::sampled_logprob)
      .def_readonly("top", &SampledLogprobs::top);
  py::class_<PromptTokenLogprobs>(m, "PromptTokenLogprobs")
      .def_readonly("token_id", &PromptTokenLogprobs::token_id)
      .def_readonly("logprob", &PromptTokenLogprobs::logprob)
      .def_readonly("rank", &PromptTokenLogprobs::rank)
      .def_readonly("top", &PromptTokenLogprobs::top);
  py::class_<RequestOutput>(m, "RequestDelta", "What one request produced since the last poll")
      .def_readonly("token_ids", &RequestOutput::token_ids)
      .def_readonly("text", &RequestOutput::text)
      .def_readonly("logprobs", &RequestOutput::logprobs)
      .def_readonly("prompt_logprobs", &RequestOutput::prompt_logprobs)
      .def_property_readonly("finish_reason", [](const RequestOutput& o) { return finish_reason_or_none(o.finish_reason); })
      .def_readonly("num_cached_tokens", &RequestOutput::num_cached_tokens)
      .def_readonly("stop_string_index", &RequestOutput::stop_string_index)
      .def_property_readonly("error", [](const RequestOutput& o) { return o.error.is_ok() ? "" : o.error.message(); });
  py::class_<CompletedRequest>(m, "CompletedRequest")
      .def_readonly("prompt_token_ids", &CompletedRequest::prompt_token_ids)
      .def_readonly("token_ids", &CompletedRequest::token_ids)
      .def_readonly("text", &CompletedRequest::text)
      .def_readonly("logprobs", &CompletedRequest::logprobs)
      .def_readonly("prompt_logprobs", &CompletedRequest::prompt_logprobs)
      .def_property_readonly("finish_reason",
                             [](const CompletedRequest& r) { return std::string(finish_reason_name(r.finish_reason)); })
      .def_readonly("num_cached_tokens", &CompletedRequest::num_cached_tokens)
      .def_readonly("stop_string_index", &CompletedRequest::stop_string_index)
      .def_property_readonly("error", [](const CompletedRequest& r) { return r.error.is_ok() ? "" : r.error.message(); });
}

void bind_batch(py::module_& m) {
  py::class_<RequestBatch>(m, "RequestBatch")
      .def("poll",
           [](RequestBatch& batch, int wait_ms) {
             std::vector<std::pair<int, RequestOutput>> outputs;
             for (BatchOutput& out : batch.poll(wait_ms)) outputs.emplace_back(out.index, std::move(out.output));
             return outputs;
           },
           py::arg("wait_ms"), py::call_guard<py::gil_scoped_release>(),
           "Waits at most wait_ms; returns [(request index, RequestDelta)] that arrived")
      .def("wait",
           [](RequestBatch& batch, int wait_ms) {
             // Outputs are kept in the results only; returns whether every request finished.
             const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
             while (!batch.finished() && std::chrono::steady_clock::now() < deadline) (void)batch.poll(wait_ms);
             return batch.finished();
           },
           py::arg("wait_ms"), py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("finished", &RequestBatch::finished)
      .def("abort_unfinished", &RequestBatch::abort_unfinished, py::arg("wait_s") = 0.0,
           py::call_guard<py::gil_scoped_release>())
      .def("results", &RequestBatch::results, py::return_value_policy::copy);
}

void bind_tokenizer(py::module_& m) {
  py::class_<TokenizerHandle>(m, "Tokenizer")
      .def("encode",
           [](const TokenizerHandle& h, const std::string& text, bool add_special_tokens) {
             return value_or_raise(h.tokenizer->encode(text, add_special_tokens));
           },
           py::arg("text"), py::arg("add_special_tokens") = true, py::call_guard<py::gil_scoped_release>())
      .def("decode",
           [](const TokenizerHandle& h, const std::vector<int32_t>& ids, bool skip_special_tokens) {
             return h.tokenizer->decode(ids, skip_special_tokens);
           },
           py::arg("token_ids"), py::arg("skip_special_tokens") = false)
      .def("token_to_id", [](const TokenizerHandle& h, const std::string& token) { return h.tokenizer->token_to_id(token); })
      .def("id_to_token", [](const TokenizerHandle& h, int32_t id) { return h.tokenizer->id_to_token(id); })
      .def("is_special", [](const TokenizerHandle& h, int32_t id) { return h.tokenizer->is_special(id); })
      .def_property_readonly("vocab_size", [](const TokenizerHandle& h) { return h.tokenizer->vocab_size(); })
      .def_property_readonly("bos_token_id", [](const TokenizerHandle& h) { return h.tokenizer->bos_token_id(); })
      .def_property_readonly("eos_token_id", [](const TokenizerHandle& h) { return h.tokenizer->eos_token_id(); })
      .def_property_readonly("bos_token", [](const TokenizerHandle& h) { return h.tokenizer->bos_token(); })
      .def_property_readonly("eos_token", [](const TokenizerHandle& h) { return h.tokenizer->eos_token(); });
}

void bind_engine(py::module_& m) {
  py::class_<OfflineEngine>(m, "Engine")
      .def_static("load", &load_engine, py::arg("model"), py::arg("revision"), py::arg("engine_args"),
                  "Loads the model and starts the engine; engine_args are [(keyword, value)]")
      .def("submit",
           [](OfflineEngine& offline, std::vector<GenerateRequest> requests) {
             return value_or_raise(RequestBatch::submit(offline.engine(), std::move(requests)));
           },
           py::arg("requests"), py::keep_alive<0, 1>(), py::call_guard<py::gil_scoped_release>())
      .def("render_chat",
           [](const OfflineEngine& offline, const std::string& body_json) {
             ChatPrompt prompt = value_or_raise(offline.render_chat(body_json));
             return std::make_pair(prompt.text, prompt.token_ids);
           },
           py::arg("body_json"), py::call_guard<py::gil_scoped_release>())
      .def("tokenizer",
           [](const OfflineEngine& offline) -> std::optional<TokenizerHandle> {
             if (!offline.tokenizer()) return std::nullopt;
             return TokenizerHandle{offline.engine().shared_tokenizer()};
           })
      .def_property_readonly("eos_token_ids",
                             [](const OfflineEngine& offline) { return offline.engine().model_config().eos_token_ids; })
      .def_property_readonly("vocab_size", [](const OfflineEngine& offline) { return offline.engine().model_config().vocab_size; })
      .def_property_readonly("max_model_len", [](const OfflineEngine& offline) { return offline.engine().config().max_model_len; })
      .def_property_readonly("model_dir", [](const OfflineEngine& offline) { return offline.engine().config().model_dir; })
      .def_property_readonly("device", [](const OfflineEngine& offline) { return offline.engine().config().device; })
      .def("generation_defaults",
           [](const OfflineEngine& offline) {
             // generation_config.json's sampling fields, as `pagellm serve` applies them (SamplingParams keywords).
             server::GenerationDefaults d = value_or_raise(server::load_generation_defaults("auto", offline.engine().config().model_dir));
             py::dict out;
             if (d.temperature) out["temperature"] = *d.temperature;
             if (d.top_p) out["top_p"] = *d.top_p;
             if (d.top_k) out["top_k"] = *d.top_k;
             if (d.min_p) out["min_p"] = *d.min_p;
             if (d.repetition_penalty) out["repetition_penalty"] = *d.repetition_penalty;
             if (d.max_tokens) out["max_tokens"] = *d.max_tokens;
             return out;
           })
      .def("is_idle_and_leak_free", [](const OfflineEngine& offline) { return offline.engine().is_idle_and_leak_free(); });
  m.def("engine_arg_names", &engine_arg_names, "The engine keywords LLM(...) accepts");
}

}  // namespace

}  // namespace pagellm::python

PYBIND11_MODULE(_pagellm, m) {
  m.doc() = "pagellm's engine (use the pagellm package: LLM, SamplingParams)";
  m.attr("__version__") = pagellm::pagellm_version();
  // As the CLI: logs on stderr, at the level $PAGELLM_LOG_LEVEL names (debug, info, warn, error, off).
  const char* log_level = std::getenv("PAGELLM_LOG_LEVEL");
  pagellm::init_logging(log_level && *log_level ? log_level : "info");
  pagellm::python::translate_errors();
  pagellm::python::bind_sampling(m);
  pagellm::python::bind_outputs(m);
  pagellm::python::bind_batch(m);
  pagellm::python::bind_tokenizer(m);
  pagellm::python::bind_engine(m);
}
