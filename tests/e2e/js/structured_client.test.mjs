// Structured outputs, forced tool calls and the Responses API through the official OpenAI
// JavaScript client against a running `pagellm serve` on a random-weight model (started by
// tests/e2e/test_openai_js.cpp; PAGELLM_BASE_URL and PAGELLM_MODEL as in openai_client.test.mjs).
import { test } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";

const baseURL = `${process.env.PAGELLM_BASE_URL ?? "http://127.0.0.1:8000"}/v1`;
const model = process.env.PAGELLM_MODEL ?? "pagellm-demo";
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0 });

const weather = {
  type: "object",
  properties: { city: { type: "string", maxLength: 10 }, days: { type: "integer", minimum: 1, maximum: 7 } },
  required: ["city", "days"],
  additionalProperties: false,
};
const tools = [{ type: "function", function: { name: "get_weather", parameters: weather } }];

function checkWeather(args) {
  assert.equal(typeof args.city, "string");
  assert.ok(Number.isInteger(args.days) && args.days >= 1 && args.days <= 7, JSON.stringify(args));
  assert.deepEqual(Object.keys(args).sort(), ["city", "days"]);
}

test("json_schema answers parse and keep the schema (temperature 1, several seeds)", async () => {
  for (const seed of [11, 12, 13]) {
    const r = await client.chat.completions.create({
      model, messages: [{ role: "user", content: "Weather plan" }], temperature: 1, seed, max_tokens: 200,
      response_format: { type: "json_schema", json_schema: { name: "plan", schema: weather, strict: true } },
    });
    assert.equal(r.choices[0].finish_reason, "stop");
    checkWeather(JSON.parse(r.choices[0].message.content));
  }
});

test("named tool_choice, streamed, gives one schema-valid call", async () => {
  for (const seed of [1, 2]) {
    const stream = await client.chat.completions.create({
      model, messages: [{ role: "user", content: "Weather?" }], tools, temperature: 1, seed, max_tokens: 200,
      tool_choice: { type: "function", function: { name: "get_weather" } }, stream: true,
    });
    const calls = [];
    let finish = null;
    for await (const chunk of stream) {
      for (const piece of chunk.choices[0]?.delta?.tool_calls ?? []) {
        calls[piece.index] ??= { id: "", name: "", arguments: "" };
        if (piece.id) calls[piece.index].id = piece.id;
        if (piece.function?.name) calls[piece.index].name = piece.function.name;
        calls[piece.index].arguments += piece.function?.arguments ?? "";
      }
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    assert.equal(calls.length, 1);
    assert.equal(calls[0].name, "get_weather");
    assert.ok(calls[0].id.length > 0);
    checkWeather(JSON.parse(calls[0].arguments));
    assert.equal(finish, "tool_calls");
  }
});

test("required tool_choice gives calls of the given tools", async () => {
  // One call at most (parallel_tool_calls false) keeps the answer bounded whatever the weights.
  const r = await client.chat.completions.create({
    model, messages: [{ role: "user", content: "Anything" }], tools, temperature: 1, seed: 5, max_tokens: 300,
    tool_choice: "required", parallel_tool_calls: false,
  });
  const calls = r.choices[0].message.tool_calls;
  assert.equal(calls.length, 1);
  for (const call of calls) {
    assert.equal(call.function.name, "get_weather");
    checkWeather(JSON.parse(call.function.arguments));
  }
  assert.equal(r.choices[0].finish_reason, "tool_calls");
});

test("Responses API: text, a function call and the tool's answer back", async () => {
  const text = await client.responses.create({ model, input: "Hello", max_output_tokens: 6, temperature: 0 });
  assert.equal(text.object, "response");
  assert.ok(["completed", "incomplete"].includes(text.status));
  assert.equal(typeof text.output_text, "string");
  assert.ok(text.usage.output_tokens >= 1);
  const called = await client.responses.create({
    model, input: [{ role: "user", content: "Weather in Paris?" }], max_output_tokens: 200, temperature: 1, seed: 3,
    tools: [{ type: "function", name: "get_weather", parameters: weather, strict: true }],
    tool_choice: { type: "function", name: "get_weather" },
  });
  const call = called.output.find((item) => item.type === "function_call");
  assert.ok(call, JSON.stringify(called.output));
  checkWeather(JSON.parse(call.arguments));
  const answered = await client.responses.create({
    model, max_output_tokens: 5, temperature: 0,
    input: [{ role: "user", content: "Weather in Paris?" }, { type: "function_call", call_id: call.call_id,
      name: "get_weather", arguments: call.arguments }, { type: "function_call_output", call_id: call.call_id,
      output: "sunny" }],
    tools: [{ type: "function", name: "get_weather", parameters: weather }], tool_choice: "none",
  });
  assert.equal(answered.object, "response");
});

test("Responses API streams its events in order", async () => {
  const stream = await client.responses.create({ model, input: "Count", max_output_tokens: 8, temperature: 0,
                                                 stream: true });
  const types = [];
  let text = "";
  let final = null;
  for await (const event of stream) {
    types.push(event.type);
    if (event.type === "response.output_text.delta") text += event.delta;
    if (event.type === "response.completed" || event.type === "response.incomplete") final = event.response;
  }
  assert.equal(types[0], "response.created");
  assert.ok(types.includes("response.output_text.delta"));
  assert.ok(types.at(-1) === "response.completed" || types.at(-1) === "response.incomplete");
  assert.equal(final.output[0].content[0].text, text);
});
