#!/usr/bin/env python3
"""Writes tests/golden/chat_template/conversations.json: the conversations that pagellm's chat
templates are checked on against jinja2 (tools/render_chat_template.py renders the expected
text at test time, so this file holds inputs only). Run from the repository root."""
import json

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


FAMILIES = {"qwen3": qwen3, "llama3": llama3, "gemma3": gemma3, "deepseek_v3": deepseek_v3}


def main():
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
