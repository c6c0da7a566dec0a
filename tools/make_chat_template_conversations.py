#!/usr/bin/env python3
"""Writes tests/golden/chat_template/conversations.json: the conversations that pagellm's chat
templates are checked on against jinja2 (tools/render_chat_template.py renders the expected
text at test time, so this file holds inputs only). Run from the repository root."""
import json
import os

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city — returns °C",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. 東京 or Zürich"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web.\nReturns \"snippets\" with \\escapes\\.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "top_k": {"type": "integer", "default": 3}, "score": {"type": "number", "minimum": 0.5}}},
    },
}

ODD_TOOL = {
    "type": "function",
    "function": {
        "name": "odd",
        "description": "Control \u0001 chars\ttab, \u2028 line sep, DEL \u007f, </tag> & 'quotes'",
        "parameters": {"type": "object", "properties": {}, "required": [], "x-limits": {"max": 1e20, "min": -0.5, "step": 1.0}},
    },
}

U = lambda text: {"role": "user", "content": text}
A = lambda text: {"role": "assistant", "content": text}
S = lambda text: {"role": "system", "content": text}
T = lambda text: {"role": "tool", "content": text}
parts = lambda *texts: [{"type": "text", "text": t} for t in texts]


def common():
    """Conversations every template can take (or must reject the same way jinja2 does)."""
    return [
        ("single_user", [U("Hello!")], {}),
        ("system_user", [S("You are a helpful assistant."), U("What is 2+2?")], {}),
        ("multi_turn", [U("Hi"), A("Hello! How can I help?"), U("Tell me a joke."), A("Why did the chicken cross the road?"), U("Why?")], {}),
        ("system_multi_turn_ends_assistant", [S("Be brief."), U("Capital of France?"), A("Paris.")], {"add_generation_prompt": False}),
        ("non_ascii", [S("Réponds en français, s'il te plaît. 🙂"), U("你好，世界！ مرحبا  Ёжик — naïve café 👩‍👩‍👧"), A("¡Hola! ñ ü ß İ"), U("e\u0301 combining, zero\u200bwidth, \u00a0nbsp")], {}),
        ("whitespace_content", [S("  padded system  \n"), U("\n\n  leading and trailing whitespace \t\n"), A("  answer  "), U("\tTabbed\r\nCRLF line\n")], {}),
        ("template_syntax_in_content", [U("{{ messages }} {% if x %} {# comment #} {%- raw %} '\"\\ \\n"), A("}} %} #} {{- -}}")], {}),
        ("empty_content", [U(""), A(""), U(" ")], {}),
        ("long_content", [U("word " * 2000), A("ok " * 500), U("last")], {}),
        ("no_generation_prompt", [U("Hello!")], {"add_generation_prompt": False}),
        ("content_parts", [U(parts("Describe ", "this  ")), A("It is a thing."), U(parts("Thanks"))], {}),
        ("system_content_parts", [{"role": "system", "content": parts("System as parts.")}, U("Hi")], {}),
        ("extra_message_fields", [{"role": "user", "content": "Hi", "name": "alice", "id": 7}], {}),
        ("empty_messages", [], {}),
        ("newlines_only", [U("\n"), A("\n\n"), U("\n\n\n")], {}),
    ]


def qwen3():
    tc = lambda name, args: {"type": "function", "function": {"name": name, "arguments": args}}
    return [
        ("thinking_disabled", [U("Solve 3*7.")], {"kwargs": {"enable_thinking": False}}),
        ("thinking_enabled", [U("Solve 3*7.")], {"kwargs": {"enable_thinking": True}}),
        ("thinking_disabled_no_gen_prompt", [U("Hi")], {"add_generation_prompt": False, "kwargs": {"enable_thinking": False}}),
        ("reasoning_content_last_turn", [U("Why is the sky blue?"), {"role": "assistant", "content": "Rayleigh scattering.", "reasoning_content": "Think about light scattering.\n"}], {"add_generation_prompt": False}),
        ("reasoning_content_history", [U("Q1"), {"role": "assistant", "content": "A1", "reasoning_content": "R1"}, U("Q2"), {"role": "assistant", "content": "A2", "reasoning_content": "R2"}, U("Q3")], {}),
        ("think_tags_in_content", [U("Q"), A("<think>\nhidden reasoning\n</think>\n\nVisible answer"), U("Next?")], {}),
        ("think_tags_last_assistant", [U("Q"), A("<think>\nreasoning here\n</think>\n\nThe answer.")], {"add_generation_prompt": False}),
        ("reasoning_content_none", [U("Q"), {"role": "assistant", "content": "A", "reasoning_content": None}], {"add_generation_prompt": False}),
        ("tools_defined", [U("Weather in Paris?")], {"tools": [WEATHER_TOOL, SEARCH_TOOL]}),
        ("tools_with_system", [S("You can use tools."), U("Weather in Paris?")], {"tools": [WEATHER_TOOL]}),
        ("tool_call_and_result", [U("Weather in Paris?"), {"role": "assistant", "content": "", "tool_calls": [tc("get_weather", {"city": "Paris", "unit": "celsius"})]}, T("{\"temp\": 21, \"sky\": \"☀️\"}"), A("It is 21°C and sunny.")], {"tools": [WEATHER_TOOL]}),
        ("parallel_tool_calls", [S("sys"), U("Weather in Paris and 東京?"), {"role": "assistant", "content": "Let me check.", "tool_calls": [tc("get_weather", {"city": "Paris"}), tc("get_weather", {"city": "東京"})]}, T("21"), T("18"), U("Thanks")], {"tools": [WEATHER_TOOL]}),
        ("tool_call_string_arguments", [U("Search cats"), {"role": "assistant", "content": None or "", "tool_calls": [tc("search", "{\"query\": \"cats\"}")]}, T("cats are great")], {"tools": [SEARCH_TOOL]}),
        ("tool_call_without_function_wrapper", [U("Search"), {"role": "assistant", "content": "", "tool_calls": [{"name": "search", "arguments": {"query": "x", "top_k": 5, "score": 0.75, "flags": [True, False, None]}}]}, T("<result>")], {"tools": [SEARCH_TOOL]}),
        ("multi_step_tool_with_reasoning", [U("Plan a trip"), {"role": "assistant", "content": "<think>\nneed weather\n</think>\n\nChecking.", "tool_calls": [tc("get_weather", {"city": "Rome"})]}, T("25"), {"role": "assistant", "content": "Rome is warm.", "reasoning_content": "got 25"}], {"tools": [WEATHER_TOOL], "add_generation_prompt": False}),
        ("user_tool_response_lookalike", [U("<tool_response>\nfake\n</tool_response>"), A("ok"), U("real question")], {}),
        ("system_not_first", [U("Hi"), S("Late system message"), U("Again")], {}),
        ("empty_tools_list", [U("Hi")], {"tools": []}),
    ]


def llama3():
    return [
        ("tool_role_message", [U("Call a tool"), A("calling"), T("{\"result\": 1}")], {}),
        ("ipython_role", [U("Run code"), {"role": "ipython", "content": "print(1)"}], {}),
        ("kwargs_ignored", [U("Hi")], {"kwargs": {"enable_thinking": False, "custom": [1, 2]}}),
        ("date_kwarg", [S("sys"), U("What day is it?")], {"kwargs": {"date_string": "26 Jul 2024"}}),
        ("many_turns", [m for i in range(10) for m in (U(f"question {i}"), A(f"answer {i}"))] + [U("final")], {}),
        ("tools_passed", [U("Weather?")], {"tools": [WEATHER_TOOL]}),
    ]


def gemma3():
    return [
        ("roles_must_alternate", [U("one"), U("two")], {}),
        ("assistant_first_rejected", [A("I start"), U("hi")], {}),
        ("image_and_text_parts", [{"role": "user", "content": [{"type": "image", "url": "x.png"}, {"type": "text", "text": " What is this? "}]}], {}),
        ("system_parts_prefix", [{"role": "system", "content": parts("Sys part one", "ignored second")}, U(parts("question"))], {}),
        ("invalid_content_type", [{"role": "user", "content": 42}], {}),
        ("content_none", [{"role": "user", "content": None}], {}),
        ("many_turns", [m for i in range(8) for m in (U(f"q{i} ✓"), A(f"a{i}"))] + [U("end")], {}),
    ]


def deepseek_v3():
    call = lambda name, args: {"type": "function", "function": {"name": name, "arguments": args}}
    return [
        ("multiple_system_messages", [S("First system."), S("Second system."), U("Hi")], {}),
        ("tool_calls_single", [U("Weather?"), {"role": "assistant", "content": None, "tool_calls": [call("get_weather", "{\"city\": \"Paris\"}")]}, T("21C"), A("It is 21C.")], {}),
        ("tool_calls_parallel", [U("Weather in two cities?"), {"role": "assistant", "content": None, "tool_calls": [call("get_weather", "{\"city\": \"Paris\"}"), call("get_weather", "{\"city\": \"東京\"}")]}, T("21C"), T("18C"), A("Paris 21C, Tokyo 18C.")], {}),
        ("tool_output_then_generation", [U("Weather?"), {"role": "assistant", "content": None, "tool_calls": [call("get_weather", "{}")]}, T("sunny")], {}),
        ("tool_output_no_generation_prompt", [U("Weather?"), {"role": "assistant", "content": None, "tool_calls": [call("get_weather", "{}")]}, T("sunny")], {"add_generation_prompt": False}),
        ("tool_calls_non_string_arguments", [U("x"), {"role": "assistant", "content": None, "tool_calls": [call("f", {"a": 1})]}], {}),
        ("system_in_middle", [U("Hi"), S("Mid-conversation system."), U("Again")], {}),
    ]


def openai_call(call_id, name, args):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


def assistant_calls(*calls, content=None):
    return {"role": "assistant", "content": content, "tool_calls": list(calls)}


def tool_result(content, call_id=None, name=None):
    m = {"role": "tool", "content": content}
    if call_id is not None:
        m["tool_call_id"] = call_id
    if name is not None:
        m["name"] = name
    return m


def llama3_1():
    weather = lambda city: openai_call("call_w1", "get_weather", {"city": city, "unit": "celsius"})
    return [
        ("tools_in_user_message", [U("Weather in Paris?")], {"tools": [WEATHER_TOOL, SEARCH_TOOL]}),
        ("tools_in_user_message_with_system", [S("  You are a weather bot.  "), U(" Weather in Paris? ")], {"tools": [WEATHER_TOOL]}),
        ("tools_in_system_message", [S("Use tools."), U("Weather in Paris?")], {"tools": [WEATHER_TOOL, SEARCH_TOOL], "kwargs": {"tools_in_user_message": False}}),
        ("tools_without_user_message", [S("sys")], {"tools": [WEATHER_TOOL]}),
        ("tools_empty_list", [U("Hi")], {"tools": []}),
        ("date_string", [S("sys"), U("What day is it?")], {"kwargs": {"date_string": "23 Nov 2026"}}),
        ("custom_tools_kwarg", [U("Weather?")], {"kwargs": {"custom_tools": [WEATHER_TOOL]}}),
        ("tool_call_content_null", [U("Weather in Paris?"), assistant_calls(weather("Paris")), tool_result("{\"temp\": 21}", "call_w1"), A("It is 21°C.")], {"tools": [WEATHER_TOOL]}),
        ("tool_call_then_generation", [S("sys"), U("Weather in 東京?"), assistant_calls(weather("東京")), tool_result("18", "call_w1")], {"tools": [WEATHER_TOOL]}),
        ("tool_call_string_arguments", [U("Search cats"), assistant_calls(openai_call("c1", "search", "{\"query\": \"cats\"}")), tool_result("cats are great")], {"tools": [SEARCH_TOOL]}),
        ("tool_call_nested_arguments", [U("Search"), assistant_calls(openai_call("c1", "search", {"query": "x", "top_k": 5, "score": 0.75, "flags": [True, False, None], "nested": {"a": "é"}}))], {"tools": [SEARCH_TOOL], "add_generation_prompt": False}),
        ("tool_call_with_content", [U("Weather?"), assistant_calls(weather("Rome"), content="Let me check."), tool_result("25")], {"tools": [WEATHER_TOOL]}),
        ("parallel_tool_calls_rejected", [U("Weather in two cities?"), assistant_calls(weather("Paris"), weather("Rome"))], {"tools": [WEATHER_TOOL]}),
        ("tool_result_mapping_content", [U("Weather?"), assistant_calls(weather("Paris")), {"role": "tool", "content": {"temp": 21, "sky": "☀️"}}], {"tools": [WEATHER_TOOL]}),
        ("tool_result_list_content", [U("Weather?"), assistant_calls(weather("Paris")), {"role": "tool", "content": [1, "two", None]}], {"tools": [WEATHER_TOOL]}),
        ("tool_result_number_content", [U("Weather?"), assistant_calls(weather("Paris")), {"role": "tool", "content": 21.5}], {"tools": [WEATHER_TOOL]}),
        ("ipython_role", [U("Run code"), {"role": "ipython", "content": "print(1)"}], {}),
        ("builtin_tools", [S("sys"), U("Search the news")], {"kwargs": {"builtin_tools": ["brave_search", "wolfram_alpha", "code_interpreter"]}}),
        ("builtin_tool_call", [U("Who won?"), assistant_calls(openai_call("b1", "brave_search", {"query": "who won \"the\" cup"})), {"role": "ipython", "content": "{\"result\": \"France\"}"}, A("France won.")], {"kwargs": {"builtin_tools": ["brave_search", "wolfram_alpha"]}}),
        ("builtin_tools_and_custom_tools", [S("sys"), U("Weather?"), assistant_calls(weather("Paris"))], {"tools": [WEATHER_TOOL], "kwargs": {"builtin_tools": ["brave_search"], "tools_in_user_message": False}, "add_generation_prompt": False}),
        ("many_turns", [m for i in range(10) for m in (U(f"question {i}"), A(f"answer {i}"))] + [U("final")], {}),
        ("tool_calls_null_rejected", [U("Hi"), {"role": "assistant", "content": "Hello", "tool_calls": None}], {}),
        ("content_null_user", [{"role": "user", "content": None}], {}),
        ("builtin_tool_call_string_arguments_rejected", [U("Who won?"), assistant_calls(openai_call("b1", "brave_search", "{\"query\": \"cup\"}"))], {"kwargs": {"builtin_tools": ["brave_search"]}}),
        ("builtin_tool_call_number_argument_rejected", [U("2+2?"), assistant_calls(openai_call("b1", "wolfram_alpha", {"query": 4}))], {"kwargs": {"builtin_tools": ["wolfram_alpha"]}}),
        ("tojson_numbers_and_escapes", [U("Go"), assistant_calls(openai_call("c1", "search", {"one": 1.0, "big": 1e20, "small": 1e-07, "neg": -0.0, "int": 12345678901234, "ctrl": "\u0001\t\u007f\u2028</script>", "quote": "say \"hi\" \\ back"}))], {"tools": [ODD_TOOL], "add_generation_prompt": False}),
        ("tools_with_empty_schema_parts", [U("x")], {"tools": [ODD_TOOL]}),
    ]


def mistral():
    call = lambda call_id, city: openai_call(call_id, "get_weather", {"city": city})
    return [
        ("tools_defined", [U("Weather in Paris?")], {"tools": [WEATHER_TOOL, SEARCH_TOOL]}),
        ("tools_with_system", [S("You are a weather bot."), U("Weather in Paris?")], {"tools": [WEATHER_TOOL]}),
        ("tools_on_last_user_message_only", [U("Hi"), A("Hello!"), U("Weather in Paris?")], {"tools": [WEATHER_TOOL]}),
        ("tools_repeated_identical_user_message", [U("Again?"), A("Yes."), U("Again?")], {"tools": [WEATHER_TOOL]}),
        ("tool_with_return_key", [U("x")], {"tools": [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object", "properties": {}}, "return": {"type": "string"}}}]}),
        ("tool_call_content_null", [U("Weather in Paris?"), assistant_calls(call("abcDEF123", "Paris")), tool_result("{\"temp\": 21}", "abcDEF123"), A("It is 21°C.")], {"tools": [WEATHER_TOOL]}),
        ("tool_call_then_generation", [S("sys"), U("Weather in 東京?"), assistant_calls(call("A1b2C3d4E", "東京")), tool_result("18", "A1b2C3d4E")], {"tools": [WEATHER_TOOL]}),
        ("parallel_tool_calls", [U("Weather in two cities?"), assistant_calls(call("aaaaaaaa1", "Paris"), call("bbbbbbbb2", "Rome")), tool_result("21", "aaaaaaaa1"), tool_result("25", "bbbbbbbb2"), A("Paris 21, Rome 25.")], {"tools": [WEATHER_TOOL]}),
        ("tool_call_string_arguments", [U("Search cats"), assistant_calls(openai_call("cats12345", "search", "{\"query\": \"cats\"}")), tool_result("cats are great", "cats12345")], {"tools": [SEARCH_TOOL]}),
        ("tool_call_bad_id_rejected", [U("Weather?"), assistant_calls(call("call_1", "Paris"))], {"tools": [WEATHER_TOOL]}),
        ("tool_result_without_id_rejected", [U("Weather?"), assistant_calls(call("abcDEF123", "Paris")), tool_result("21")], {"tools": [WEATHER_TOOL]}),
        ("tool_results_role_nested_content", [U("Weather?"), assistant_calls(call("abcDEF123", "Paris")), {"role": "tool_results", "content": {"content": {"temp": 21}}, "tool_call_id": "abcDEF123"}], {"tools": [WEATHER_TOOL]}),
        ("tool_result_dict_content", [U("Weather?"), assistant_calls(call("abcDEF123", "Paris")), {"role": "tool", "content": {"temp": 21, "sky": "sunny"}, "tool_call_id": "abcDEF123"}], {"tools": [WEATHER_TOOL]}),
        ("roles_must_alternate", [U("one"), U("two")], {}),
        ("assistant_first_rejected", [A("I start"), U("hi")], {}),
        ("unknown_role_rejected", [U("hi"), {"role": "narrator", "content": "..."}], {}),
        ("system_with_history", [S("Be brief."), U("Q1"), A("A1"), U("Q2")], {}),
        ("tool_calls_none_is_plain_assistant", [U("Q"), {"role": "assistant", "content": "  plain  ", "tool_calls": None}, U("Q2")], {}),
        ("many_turns", [m for i in range(6) for m in (U(f"q{i}"), A(f"a{i}"))] + [U("end")], {}),
        ("assistant_content_null_without_tool_calls", [U("Q"), {"role": "assistant", "content": None}, U("Q2")], {}),
        ("user_content_null_rejected", [{"role": "user", "content": None}], {}),
        ("tool_result_python_repr", [U("Weather?"), assistant_calls(call("abcDEF123", "Paris")), {"role": "tool", "content": {"s": "it's", "q": "say \"hi\"", "b": True, "n": None, "f": 1.5, "e": 1e20, "u": "é\n", "l": [1, [2, {}]]}, "tool_call_id": "abcDEF123"}], {"tools": [WEATHER_TOOL]}),
        ("tool_result_list_content", [U("Weather?"), assistant_calls(call("abcDEF123", "Paris")), {"role": "tool", "content": ["a", 1, None, False], "tool_call_id": "abcDEF123"}], {"tools": [WEATHER_TOOL]}),
        ("tojson_numbers_and_escapes", [U("Go"), assistant_calls(openai_call("c12345678", "search", {"one": 1.0, "big": 1e20, "small": 1e-07, "neg": -0.0, "ctrl": "\u0001\t\u007f\u2028</script>", "quote": "say \"hi\" \\ back"}))], {"tools": [ODD_TOOL], "add_generation_prompt": False}),
    ]


def gemma3_more():
    return [
        ("system_folded_into_first_user", [S("You are terse."), U("Q1"), A("A1"), U("Q2")], {}),
        ("system_only", [S("Only a system prompt.")], {}),
        ("assistant_content_null_rejected", [U("Weather?"), {"role": "assistant", "content": None, "tool_calls": [openai_call("c1", "get_weather", {"city": "Paris"})]}], {}),
        ("tool_role_breaks_alternation", [U("Weather?"), A("Checking."), tool_result("21", "c1")], {}),
        ("tools_ignored", [U("Weather?")], {"tools": [WEATHER_TOOL]}),
    ]


FAMILIES = {"qwen3": qwen3, "llama3": llama3, "gemma3": lambda: gemma3() + gemma3_more(),
            "deepseek_v3": deepseek_v3, "llama3_1": llama3_1, "mistral": mistral}

# Families whose template is not in an npm tokenizer package: tests/golden/chat_template/templates/
# <family>/chat_template.jinja is the template as the model ships it, and this script writes the
# tokenizer_config.json beside it (template + special tokens) that the tests load.
TEMPLATE_CONFIGS = {
    "llama3_1": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
                 "tokenizer_class": "PreTrainedTokenizerFast",
                 "source": "Llama 3.1 Instruct (meta-llama/Llama-3.1-8B-Instruct tokenizer_config.json)"},
    "mistral": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "tokenizer_class": "LlamaTokenizer",
                "source": "Mistral-7B-Instruct-v0.3 tokenizer_config.json (the template with tool calls)"},
}


def write_template_configs():
    for family, fields in TEMPLATE_CONFIGS.items():
        folder = os.path.join("tests", "golden", "chat_template", "templates", family)
        with open(os.path.join(folder, "chat_template.jinja"), encoding="utf-8") as f:
            template = f.read()
        config = {k: v for k, v in fields.items() if k != "source"}
        config["chat_template"] = template
        config["_comment"] = ("Written by tools/make_chat_template_conversations.py from chat_template.jinja: " +
                              fields["source"])
        with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f, ensure_ascii=False, indent=2)
            f.write("\n")


def main():
    write_template_configs()
    cases = []
    for family, specific in FAMILIES.items():
        for name, messages, options in common() + specific():
            case = {"family": family, "name": name, "messages": messages,
                    "add_generation_prompt": options.get("add_generation_prompt", True)}
            if "tools" in options:
                case["tools"] = options["tools"]
            if "kwargs" in options:
                case["kwargs"] = options["kwargs"]
            cases.append(case)
    # Each case again with the other add_generation_prompt setting where that changes the prompt.
    flipped = []
    for case in cases:
        if case["name"] in ("multi_turn", "system_user", "tool_call_and_result", "thinking_disabled", "non_ascii"):
            c = dict(case, name=case["name"] + "_flip_gen_prompt", add_generation_prompt=not case["add_generation_prompt"])
            flipped.append(c)
    cases += flipped
    with open("tests/golden/chat_template/conversations.json", "w", encoding="utf-8") as f:
        json.dump({"comment": "Inputs for chat-template oracle tests; written by tools/make_chat_template_conversations.py. "
                              "Expected outputs are rendered at test time by tools/render_chat_template.py (jinja2).",
                   "cases": cases}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    counts = {}
    for c in cases:
        counts[c["family"]] = counts.get(c["family"], 0) + 1
    print(counts)


if __name__ == "__main__":
    main()
