// The Jinja interpreter on small templates: every case is rendered by us and by jinja2
// (tools/render_chat_template.py) and must agree, byte for byte, including whether it fails.
// A few cases also pin the expected text here, so the intent is visible without the oracle.
#include <gtest/gtest.h>

#include "jinja_oracle.h"
#include "tokenizer/chat_template.h"

namespace pagellm::test {
namespace {

struct Case {
  const char* source;
  const char* vars;  // JSON object of template variables
};

// clang-format off
const Case kCases[] = {
    // ---- whitespace control, trim_blocks, lstrip_blocks, comments, raw ----
    {"{% if true %}\n  yes\n{% endif %}\nafter\n", "{}"},
    {"  {% for i in range(3) %}\n    {{ i }}\n  {% endfor %}\nend", "{}"},
    {"a  {%- if true -%}  b  {%- endif -%}  c", "{}"},
    {"x  {{- ' y ' -}}  z\n", "{}"},
    {"  {%+ if true %}x{% endif +%}\n y", "{}"},
    {"line1\n  {# a comment #}\nline2 {#- trimmed -#}   line3", "{}"},
    {"{% raw %}{{ not evaluated }}{% endraw %}\n  {%- raw -%}  x  {%- endraw %}|", "{}"},
    {"crlf\r\nline {{ 1 }}\r\n{% if true %}\r\nin\r\n{% endif %}\r\n", "{}"},
    {"{{ 'a' }}\n{{ 'b' }}\n\n", "{}"},
    {"\t{% if true %}\t\n  \t{% set x = 1 %}\n{{ x }}  {% if true %}keep-indent{% endif %}", "{}"},
    {"{% for m in ms %}\n{{ m }}\n{% endfor %}", R"({"ms": ["a", "b"]})"},
    {"{%- for m in ms -%}\n  <{{ m }}>\n{%- endfor -%}\n", R"({"ms": ["a", "b"]})"},
    {"text {{ '{{' }} {{ '}}' }} {{ '{%' }}", "{}"},
    {"a\u00a0 {%- if true %}b{% endif %}\u3000{{- 'c' }}", "{}"},
    // ---- loops ----
    {"{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}[{{ loop.previtem }}|{{ loop.nextitem }}] {% endfor %}", "{}"},
    {"{% for x in [] %}{{ x }}{% else %}empty{% endfor %}", "{}"},
    {"{% for x in range(10) if x is odd %}{{ x }}:{{ loop.index }}/{{ loop.length }} {% else %}none{% endfor %}", "{}"},
    {"{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}", "{}"},
    {"{% for a in [1, 2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.index }} {% endfor %}{{ loop.index }};{% endfor %}", "{}"},
    {"{% for x in range(5) %}{{ loop.cycle('odd', 'even') }} {% endfor %}", "{}"},
    {"{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}", R"({"d": {"b": 1, "a": [1, 2]}})"},
    {"{% for k, v in d|items %}{{ k }}={{ v }};{% endfor %}{% for k, v in d|dictsort %}{{ k }}{% endfor %}", R"({"d": {"b": 1, "a": 2}})"},
    {"{% for x in undefined_thing %}{{ x }}{% else %}no items{% endfor %}", "{}"},
    {"{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }} {% endfor %}", "{}"},
    {"{% for a, b in [[1, 2, 3]] %}{% endfor %}", "{}"},
    // ---- scoping, set, namespace ----
    {"{% set x = 1 %}{% for i in range(3) %}{{ x }}{% set x = x + 1 %}{{ x }}|{% endfor %}{{ x }}", "{}"},
    {"{% for i in range(3) %}{% if i == 0 %}{% set y = 5 %}{% endif %}{{ y }}|{% endfor %}{{ y }}", "{}"},
    {"{% set ns = namespace(total=0, items=[]) %}{% for i in range(4) %}{% set ns.total = ns.total + i %}{% endfor %}{{ ns.total }} {{ ns.items }} {{ ns }}", "{}"},
    {"{% set a, b = 1, 'two' %}{{ a }}{{ b }}{% set t = 1, 2 %}{{ t }}", "{}"},
    {"{% set block %}\n  inner {{ 1 + 1 }}\n{% endset %}[{{ block }}]{% set up | upper %}shout{% endset %}{{ up }}", "{}"},
    {"{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a }}", "{}"},
    {"{% set x = 5 %}{% macro show() %}{{ x }}{% endmacro %}{{ show() }}{% set x = 6 %}{{ show() }}", "{}"},
    {"{% if not add_generation_prompt is defined %}{% set add_generation_prompt = 'set' %}{% endif %}{{ add_generation_prompt }}", "{}"},
    // ---- macros and call ----
    {"{% macro greet(name, greeting='Hello', punct='!') %}{{ greeting }}, {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', punct='?') }} {{ greet(greeting='Hi', name='Cy') }}", "{}"},
    {"{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k='v') }}", "{}"},
    {"{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}", "{}"},
    {"{% macro m(a) %}[{{ a }}]{% endmacro %}{{ m() }}{{ m(a=none) }}", "{}"},
    {"{% macro box(title) %}<{{ title }}>{{ caller() }}</{{ title }}>{% endmacro %}{% call box('b') %}inside {{ 1 }}{% endcall %}", "{}"},
    {"{% macro list_items(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% endmacro %}{% call(item) list_items([1, 2]) %}<{{ item }}>{% endcall %}", "{}"},
    {"{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(6) }}", "{}"},
    {"{% filter upper %}shout {{ 'this' }}{% endfilter %}", "{}"},
    {"{% for m in ms %}{% generation %}<{{ m }}>{% endgeneration %}{% endfor %}", R"({"ms": [1, 2]})"},
    {"{{ strftime_now('%Y') }} {{ raise_exception is defined }}", "{}"},
    {"{{ 'a'.strip(chars='a') }}", "{}"},
    {"{{ [1]|join(', ', attribute=none, extra=1) }}", "{}"},
    {"{{ []|map('nosuchfilter')|list }} {{ []|select('nosuchtest')|list }}", "{}"},
    {"{{ 'zz'|int(base=36) }} {{ '0b101'|int(base=0) }} {{ '017'|int(base=0) }} {{ 'x'|int(base=99) }}", "{}"},
    // ---- literals and printing as Python does ----
    {"{{ none }} {{ None }} {{ true }} {{ False }} {{ 1 }} {{ -7 }} {{ 1.0 }} {{ 1.5e3 }} {{ 1e20 }} {{ 1e16 }} {{ 1e15 }} {{ 1e-5 }} {{ 0.0001 }} {{ 1_000 }} {{ 0x1F }} {{ 0o17 }} {{ 0b101 }}", "{}"},
    {"{{ [1, 'a', none, true, 2.5, [], {}] }} {{ {'k': 'v', 'n': none, 1: [1]} }} {{ (1,) }} {{ () }} {{ (1, 'b') }}", "{}"},
    {"{{ \"it's\" }} {{ ['it\\'s', \"say \\\"hi\\\"\", 'both \\' \"', 'tab\\tnl\\n', 'bs\\\\', 'é✓', '\\x01'] }}", "{}"},
    {"{{ 'a' 'b' \"c\" }} {{ '\\u00e9\\U0001F600\\x41\\101\\q' }}", "{}"},
    {"{{ 0.1 + 0.2 }} {{ 1 / 3 }} {{ 10 / 2 }} {{ 2 ** 0.5 }} {{ -0.0 }} {{ 123456789.123456789 }} {{ 1e300 * 10 }}", "{}"},
    {"{{ d }} {{ d.nested }} {{ d['list'] }}", R"({"d": {"s": "x", "f": 0.5, "i": 3, "b": false, "n": null, "nested": {"a": [1, {"b": "é"}]}, "list": [1.25, -3]}})"},
    {"{{ d.items() }} {{ d.keys() }} {{ d.values() }} {{ range(3) }} {{ range(1, 9, 2) }}", R"({"d": {"a": 1}})"},
    // ---- expressions ----
    {"{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 2 ** -1 }}", "{}"},
    {"{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 'a' != 'a' }} {{ 2 >= 2 }} {{ 1 <= 0 }}", "{}"},
    {"{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }} {{ 3 not in [3] }} {{ 'x' in undefined_thing }}", "{}"},
    {"{{ 'a' ~ 1 ~ none ~ true ~ 1.5 ~ undefined_thing ~ [1] }}", "{}"},
    {"{{ 'yes' if 1 else 'no' }} {{ 'yes' if 0 else 'no' }} [{{ 'only' if false }}] {{ 'a' if false else 'b' if false else 'c' }}", "{}"},
    {"{{ 1 and 'x' }} {{ 0 and 'x' }} {{ 0 or '' or 'z' }} {{ not 0 }} {{ not [] }} {{ none or 5 }}", "{}"},
    {"{{ 'ab' * 3 }} {{ [1] * 3 }} {{ 3 * 'x' }} {{ [1] + [2] }} {{ 'a' + 'b' }} {{ 1 + 2.5 }} {{ true + true }}", "{}"},
    {"{{ x.y }}|{{ x['y'] }}|{{ x.y is defined }}|{{ none.foo }}|{{ l[10] }}|{{ 'abc'.nope }}|{{ s[0] }}{{ s[-1] }}|{{ l.1 }}", R"({"x": {}, "l": [1, 2], "s": "héllo"})"},
    {"{{ d.get('a') }} {{ d.get('zz') }} {{ d.get('zz', 'def') }} {{ d['items'] }}", R"({"d": {"a": 1, "items": 2}})"},
    // ---- slicing ----
    {"{{ l[::-1] }} {{ l[1:] }} {{ l[:-1] }} {{ l[::2] }} {{ l[-2:] }} {{ l[1:3] }} {{ l[5:] }} {{ l[-100:2] }} {{ l[::-2] }} {{ l[3:0:-1] }}", R"({"l": [0, 1, 2, 3, 4]})"},
    {"{{ s[::-1] }} {{ s[1:4] }} {{ s[-3:] }} {{ s[:0] }} {{ (1, 2, 3)[1:] }}", R"({"s": "héllo✓世界"})"},
    // ---- string methods ----
    {"{{ s.startswith('He') }} {{ s.endswith(('x', 'ld')) }} {{ s.split() }} {{ s.split('l') }} {{ s.split('l', 1) }} {{ s.rsplit('l', 1) }} {{ '  a b  '.split(None, 1) }}", R"({"s": "Hello world"})"},
    {"[{{ s.strip() }}] [{{ s.lstrip() }}] [{{ s.rstrip() }}] [{{ 'xxhixx'.strip('x') }}] [{{ '\\n\\nhi\\n'.lstrip('\\n') }}] [{{ '\\u3000 wide \\u00a0'.strip() }}]", R"({"s": "  padded \t\n"})"},
    {"{{ s.replace('l', 'L') }} {{ s.replace('l', 'L', 1) }} {{ s.upper() }} {{ s.lower() }} {{ s.title() }} {{ s.capitalize() }} {{ s.find('o') }} {{ s.rfind('o') }} {{ s.find('z') }} {{ s.count('l') }}", R"({"s": "héllo wOrld"})"},
    {"{{ '-'.join(['a', 'b']) }} {{ 'a\\nb\\r\\nc'.splitlines() }} {{ '{} and {}'.format(1, 'x') }} {{ '{0}{name}'.format('a', name='b') }} {{ 'abc'.isalpha() }} {{ '12'.isdigit() }} {{ 'Ab'.islower() }} {{ 'straße'.upper() }}", "{}"},
    // ---- filters ----
    {"{{ d|tojson }} {{ d|tojson(indent=2) }} {{ d|tojson(sort_keys=true) }} {{ d|tojson(separators=(',', ':')) }} {{ 'é\"\\n</script>'|tojson }} {{ [1.0, 2.5e-7, none, true]|tojson }} {{ {}|tojson(indent=2) }}", R"({"d": {"b": [1, {"c": "日本"}], "a": null}})"},
    {"{{ l|length }} {{ l|count }} {{ 'héllo'|length }} {{ d|length }} {{ undefined_thing|length }} {{ l|first }} {{ l|last }} {{ l|join(', ') }} {{ l|join }} {{ l|list }} {{ 'ab'|list }} {{ l|reverse|list }} {{ 'abc'|reverse }}", R"({"l": [3, 1, 2], "d": {"a": 1}})"},
    {"[{{ '  x  '|trim }}] [{{ 'xxaxx'|trim('x') }}] {{ 'Hello'|upper }} {{ 'Hello'|lower }} {{ 'hELLO wORLD'|capitalize }} {{ 'hello wORLD-foo(bar [x'|title }} {{ 'a b'|replace(' ', '_') }} {{ 5|string }}{{ none|string }} {{ '<b>&'|e }} {{ 'x'|safe }}", "{}"},
    {"{{ msgs|selectattr('role', 'equalto', 'user')|list }} {{ msgs|rejectattr('role', 'eq', 'user')|map(attribute='content')|list }} {{ msgs|selectattr('tool')|list|length }} {{ msgs|map(attribute='role')|join('/') }} {{ msgs|map(attribute='missing', default='d')|list }}", R"({"msgs": [{"role": "system", "content": "s"}, {"role": "user", "content": "u1", "tool": true}, {"role": "user", "content": "u2"}]})"},
    {"{{ [1, 2, 3, 4]|select('even')|list }} {{ [1, 2, 3, 4]|reject('odd')|list }} {{ [0, 1, '', 'a']|select|list }} {{ ['a', 'B']|map('upper')|list }} {{ [1, 5, 3]|select('gt', 2)|list }} {{ [1, 2]|select('in', [2, 3])|list }}", "{}"},
    {"{{ undefined_thing|default('dflt') }} {{ ''|default('dflt') }} {{ ''|default('dflt', true) }} {{ none|d('x') }} {{ 0|default(5, boolean=true) }}", "{}"},
    {"{{ '42'|int }} {{ '3.7'|int }} {{ 'abc'|int }} {{ 'abc'|int(7) }} {{ 3.9|int }} {{ '0x1A'|int(base=16) }} {{ ' 1_000 '|int }} {{ none|int }} {{ '2.5'|float }} {{ 'x'|float }} {{ 3|float }} {{ '1e3'|float }}", "{}"},
    {"{{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 3|round }} {{ 2.1|round(method='ceil') }} {{ 2.9|round(0, 'floor') }} {{ -2.5|abs }} {{ -3|abs }} {{ 1.23456|round(3) }}", "{}"},
    {"{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(2, blank=true) }}|{{ 'x\\ny'|indent('> ') }}", "{}"},
    {"{{ ['b', 'A', 'c']|sort }} {{ ['b', 'A', 'c']|sort(case_sensitive=true) }} {{ [3, 1, 2]|sort(reverse=true) }} {{ people|sort(attribute='age')|map(attribute='name')|join(',') }} {{ ['a', 'A', 'b', 'a']|unique|list }} {{ people|map(attribute='age')|max }} {{ people|min(attribute='age') }} {{ [1, 2.5]|sum }} {{ people|sum(attribute='age') }}", R"({"people": [{"name": "x", "age": 30}, {"name": "y", "age": 20}, {"name": "z", "age": 25}]})"},
    {"{{ d|dictsort }} {{ d|dictsort(reverse=true) }} {{ d|dictsort(by='value') }} {{ 'Hello big world_2'|wordcount }} {{ d|items|list }}", R"({"d": {"b": 1, "A": 3, "c": 2}})"},
    // ---- tests ----
    {"{{ x is defined }} {{ y is undefined }} {{ n is none }} {{ s is string }} {{ d is mapping }} {{ l is iterable }} {{ s is iterable }} {{ 3 is iterable }} {{ l is sequence }} {{ d is sequence }} {{ 3 is number }} {{ true is number }} {{ true is integer }} {{ 1.0 is float }} {{ true is boolean }} {{ 1 is boolean }}", R"({"x": 1, "n": null, "s": "s", "d": {}, "l": []})"},
    {"{{ true is true }} {{ 1 is true }} {{ false is false }} {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ 1 is eq 1 }} {{ 1 is ne 2 }} {{ 'ab' is lower }} {{ 'AB' is upper }} {{ 2 is in [1, 2] }} {{ 2 is gt 1 }} {{ 2 is lt 1 }} {{ 'tojson' is filter }} {{ 'odd' is test }} {{ none is sameas none }} {{ x is not none }} {{ x is not defined }}", R"({"x": 1})"},
    {"{{ undefined_thing is callable }} {{ range is callable }} {{ undefined_thing is sequence }} {{ undefined_thing is iterable }} {{ undefined_thing is mapping }} {{ undefined_thing is string }}", "{}"},
    // ---- failures jinja2 reports too ----
    {"{{ undefined_thing.attr }}", "{}"},
    {"{{ x.y.z }}", R"({"x": {}})"},
    {"{{ 1 + undefined_thing }}", "{}"},
    {"{{ 'a' + 1 }}", "{}"},
    {"{{ none + 1 }}", "{}"},
    {"{{ 1 / 0 }}", "{}"},
    {"{{ 'a' in none }}", "{}"},
    {"{{ undefined_thing|tojson }}", "{}"},
    {"{{ d.pop('a') }}", R"({"d": {"a": 1}})"},
    {"{{ [1].append(2) }}", "{}"},
    {"{% set x = 1 %}{% set x.attr = 2 %}", "{}"},
    {"{{ range(200000)|length }}", "{}"},
    {"{{ raise_exception('custom failure: ' ~ 42) }}", "{}"},
    {"{% for x in 5 %}{% endfor %}", "{}"},
    {"{{ undefined_fn() }}", "{}"},
    {"{{ 'abc'(1) }}", "{}"},
    {"{{ l|selectattr('x')|length }}", R"({"l": [{"x": 1}]})"},
    {"{{ {[1]: 2} }}", "{}"},
};
// clang-format on

ChatTemplateInputs inputs_with(const char* vars) {
  ChatTemplateInputs inputs;
  inputs.extra_kwargs = nlohmann::ordered_json::parse(vars);
  return inputs;
}

TEST(JinjaInterpreter, SmallTemplatesMatchJinja2) {
  nlohmann::ordered_json requests = nlohmann::ordered_json::array();
  for (const Case& c : kCases)
    requests.push_back({{"template", c.source}, {"kwargs", nlohmann::ordered_json::parse(c.vars)}});
  std::string why;
  std::vector<OracleResult> expected = run_jinja_oracle(requests, &why);
  ASSERT_EQ(expected.size(), std::size(kCases)) << why;
  int matched = 0;
  for (size_t i = 0; i < std::size(kCases); ++i) {
    const Case& c = kCases[i];
    auto t = ChatTemplate::from_string(c.source);
    Expected<std::string> got = t.has_value() ? t->render(inputs_with(c.vars))
                                              : Expected<std::string>(t.status());
    if (expected[i].ok) {
      ASSERT_TRUE(got.has_value()) << c.source << "\n-> " << got.status().message();
      EXPECT_EQ(*got, expected[i].text) << c.source;
      matched += *got == expected[i].text;
    } else {
      EXPECT_FALSE(got.has_value()) << c.source << "\njinja2: " << expected[i].error << "\nours: " << *got;
      matched += !got.has_value();
    }
  }
  std::printf("[jinja] %d/%zu small templates match jinja2\n", matched, std::size(kCases));
}

std::string render(const std::string& source, const char* vars = "{}") {
  auto t = ChatTemplate::from_string(source);
  if (!t.has_value()) return "PARSE ERROR " + t.status().message();
  auto r = t->render(inputs_with(vars));
  return r.has_value() ? *r : "ERROR " + r.status().message();
}

TEST(JinjaInterpreter, WhitespaceControlPinned) {
  EXPECT_EQ(render("{% if true %}\n  yes\n{% endif %}\nafter\n"), "  yes\nafter");
  EXPECT_EQ(render("a  {%- if true -%}  b  {%- endif -%}  c"), "abc");
  EXPECT_EQ(render("  {% for i in range(3) %}\n    {{ i }}\n  {% endfor %}\nend"), "    0\n    1\n    2\nend");
  EXPECT_EQ(render("x  {{- ' y ' -}}  z"), "x y z");
  EXPECT_EQ(render("  {%+ if true %}x{% endif +%}\n y"), "  x\n y");
}

TEST(JinjaInterpreter, LoopsMacrosSlicingFiltersPinned) {
  EXPECT_EQ(render("{% for x in 'ab' %}{{ loop.index }}{{ loop.last }}{% endfor %}"), "1False2True");
  EXPECT_EQ(render("{% macro m(a, b=2) %}{{ a }}+{{ b }}{% endmacro %}{{ m(1) }} {{ m(1, b=3) }}"), "1+2 1+3");
  EXPECT_EQ(render("{{ l[::-1] }} {{ 'héllo'[::-1] }}", R"({"l": [1, 2, 3]})"), "[3, 2, 1] olléh");
  EXPECT_EQ(render("{{ {'a': 'é'}|tojson }} {{ [none, true] }}"), "{\"a\": \"é\"} [None, True]");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"), "3");
}

TEST(JinjaInterpreter, ErrorsCarryLineAndColumn) {
  EXPECT_EQ(render("line one\n{{ x.y }}"), "ERROR [chat_template] line 2, column 5: 'x' is undefined");
  EXPECT_EQ(render("{% if true %}\n  {% bogus %}\n{% endif %}"),
            "PARSE ERROR [chat_template] line 2, column 6: Encountered unknown tag 'bogus'");
  EXPECT_EQ(render("{{ 1 +  }}"), "PARSE ERROR [chat_template] line 1, column 9: unexpected token end of print statement");
  EXPECT_EQ(render("{% for x in y %}"), "PARSE ERROR [chat_template] line 1, column 17: unexpected end of template, expected 'endfor' or 'else'");
  EXPECT_EQ(render("ok\n  {{ 'abc' | nosuchfilter }}"),
            "PARSE ERROR [chat_template] line 2, column 14: no filter named 'nosuchfilter' (unknown or unsupported)");
  EXPECT_EQ(render("{{ 'unterminated }}"), "PARSE ERROR [chat_template] line 1, column 4: unexpected end of string literal");
  EXPECT_EQ(render("{% break %}"), "PARSE ERROR [chat_template] line 1, column 4: 'break' outside of a loop");
}

TEST(JinjaInterpreter, UnsupportedConstructsAreErrors) {
  for (const char* source : {"{% include 'x' %}", "{% extends 'x' %}", "{% for x in y recursive %}{% endfor %}",
                             "{{ f(*args) }}", "{{ x|batch(2) }}", "{{ 'x %s' % 1 }}", "{{ 'a'.center(5) }}", "{{ x.__class__ }}"}) {
    std::string out = render(source, R"({"x": {}})");
    EXPECT_TRUE(out.rfind("PARSE ERROR [chat_template] ", 0) == 0 || out.rfind("ERROR [chat_template] ", 0) == 0)
        << source << " -> " << out;
  }
}

TEST(JinjaInterpreter, DeepNestingIsAnErrorNotACrash) {
  std::string deep_expr = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  EXPECT_NE(render(deep_expr).find("nested too deeply"), std::string::npos);
  std::string deep_blocks;
  for (int i = 0; i < 3000; ++i) deep_blocks += "{% if true %}";
  EXPECT_NE(render(deep_blocks).find("nested too deeply"), std::string::npos);
  std::string long_chain = "{{ x";
  for (int i = 0; i < 5000; ++i) long_chain += ".a";
  long_chain += " }}";
  EXPECT_NE(render(long_chain).find("nested too deeply"), std::string::npos);
  EXPECT_NE(render("{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}").find("recursion"), std::string::npos);
  std::string deep_json = std::string(2000, '[') + std::string(2000, ']');
  EXPECT_NE(render("{{ x }}", ("{\"x\": " + deep_json + "}").c_str()).find("nested deeper"), std::string::npos);
  EXPECT_NE(render("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}").find("step limit"),
            std::string::npos);
}

}  // namespace
}  // namespace pagellm::test
