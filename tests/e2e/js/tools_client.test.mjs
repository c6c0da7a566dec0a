// The official OpenAI JavaScript client against `pagellm serve --enable-auto-tool-choice
// --tool-call-parser hermes --reasoning-parser qwen3` (started by tests/e2e/test_serve_tools.cpp;
// PAGELLM_BASE_URL and PAGELLM_MODEL as for openai_client.test.mjs): tool-call history, tools in
// whole and streamed requests, and the errors the client sees.
import { test } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";

const baseURL = `${process.env.PAGELLM_BASE_URL ?? "http://127.0.0.1:8000"}/v1`;
const model = process.env.PAGELLM_MODEL ?? "pagellm-demo";
const client = new OpenAI({ baseURL, apiKey: process.env.PAGELLM_API_KEY ?? "unused", maxRetries: 0 });

const tools = [{
  type: "function",
  function: {
    name: "get_weather",
    description: "Current weather of a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
}];

// An agent loop's second request: the assistant called a tool (content null), the tool answered.
const history = [
  { role: "user", content: "What is the weather in Paris?" },
  {
    role: "assistant", content: null,
    tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: "{\"city\":\"Paris\"}" } }],
  },
  { role: "tool", tool_call_id: "call_1", content: "{\"temp_c\": 21}" },
];

function checkMessage(message) {
  assert.equal(message.role, "assistant");
  assert.ok(message.content === null || typeof message.content === "string");
  assert.ok(message.reasoning_content === null || typeof message.reasoning_content === "string");
  for (const call of message.tool_calls ?? []) {
    assert.equal(call.type, "function");
    assert.equal(typeof call.id, "string");
    JSON.parse(call.function.arguments);
  }
}

test("tool-call history round-trips", async () => {
  const r = await client.chat.completions.create({ model, messages: history, tools, max_tokens: 16, temperature: 0 });
  assert.equal(r.choices.length, 1);
  checkMessage(r.choices[0].message);
  assert.ok(["stop", "length", "tool_calls"].includes(r.choices[0].finish_reason));
});

test("streamed tool-call history adds up to the whole answer", async () => {
  const request = { model, messages: history, tools, max_tokens: 16, temperature: 0 };
  const whole = await client.chat.completions.create(request);
  const stream = await client.chat.completions.create({ ...request, stream: true });
  let content = "";
  let reasoning = "";
  let finish = null;
  const calls = [];
  for await (const chunk of stream) {
    const delta = chunk.choices[0].delta;
    content += delta.content ?? "";
    reasoning += delta.reasoning_content ?? "";
    for (const piece of delta.tool_calls ?? []) {
      if (piece.id) calls[piece.index] = { name: piece.function.name, arguments: "" };
      calls[piece.index].arguments += piece.function.arguments ?? "";
    }
    finish = chunk.choices[0].finish_reason ?? finish;
  }
  const message = whole.choices[0].message;
  assert.equal(content, message.content ?? "");
  assert.equal(reasoning, message.reasoning_content ?? "");
  assert.equal(calls.length, (message.tool_calls ?? []).length);
  assert.equal(finish, whole.choices[0].finish_reason);
});

test("a named tool_choice must be one of the tools", async () => {
  await assert.rejects(
    client.chat.completions.create({
      model, messages: history, tools, max_tokens: 4,
      tool_choice: { type: "function", function: { name: "get_time" } },
    }),
    (error) => error.status === 400 && error.param === "tool_choice",
  );
});

test("an unimplemented field is a 400 naming it", async () => {
  await assert.rejects(
    client.chat.completions.create({ model, messages: history, max_tokens: 4, prediction: { type: "content", content: "x" } }),
    (error) => error.status === 400 && error.param === "prediction",
  );
});
