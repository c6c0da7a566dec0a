// The official OpenAI JavaScript client against a running `pagellm serve`.
// PAGELLM_BASE_URL (http://127.0.0.1:PORT) and PAGELLM_MODEL come from the gtest that starts the
// server (tests/e2e/test_openai_js.cpp); run by hand the same way.
import { test } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";

const baseURL = `${process.env.PAGELLM_BASE_URL ?? "http://127.0.0.1:8000"}/v1`;
const model = process.env.PAGELLM_MODEL ?? "pagellm-demo";
const client = new OpenAI({ baseURL, apiKey: process.env.PAGELLM_API_KEY ?? "unused", maxRetries: 0 });

test("chat completion", async () => {
  const r = await client.chat.completions.create({
    model,
    messages: [{ role: "user", content: "Say hello" }],
    max_tokens: 8,
    temperature: 0,
  });
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.object, "chat.completion");
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, "assistant");
  assert.equal(typeof r.choices[0].message.content, "string");
  assert.ok(["stop", "length"].includes(r.choices[0].finish_reason));
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
});

test("streamed chat completion", async () => {
  const whole = await client.chat.completions.create({
    model, messages: [{ role: "user", content: "Count" }], max_tokens: 10, temperature: 0, ignore_eos: true,
  });
  const stream = await client.chat.completions.create({
    model, messages: [{ role: "user", content: "Count" }], max_tokens: 10, temperature: 0, ignore_eos: true,
    stream: true, stream_options: { include_usage: true },
  });
  let text = "";
  let role = null;
  let finish = null;
  let usage = null;
  let tokenChunks = 0;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    if (chunk.choices.length === 0) continue;
    tokenChunks += 1;
    role ??= chunk.choices[0].delta.role ?? null;
    text += chunk.choices[0].delta.content ?? "";
    finish = chunk.choices[0].finish_reason ?? finish;
  }
  assert.equal(role, "assistant");
  assert.equal(finish, "length");
  assert.equal(usage.completion_tokens, 10);
  assert.equal(tokenChunks, 10);
  assert.equal(text, whole.choices[0].message.content);
});

test("completions with token-id prompts and n=2", async () => {
  const r = await client.completions.create({
    model, prompt: [[1, 2, 3], [4, 5]], max_tokens: 4, n: 2, seed: 3, ignore_eos: true,
  });
  assert.match(r.id, /^cmpl-/);
  assert.equal(r.object, "text_completion");
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2, 3]);
  for (const c of r.choices) assert.equal(c.finish_reason, "length");
  assert.equal(r.usage.prompt_tokens, 5);
  assert.equal(r.usage.completion_tokens, 16);
});

test("logprobs", async () => {
  const completion = await client.completions.create({
    model, prompt: "Hello", max_tokens: 3, logprobs: 2, temperature: 0, ignore_eos: true,
  });
  const lp = completion.choices[0].logprobs;
  assert.equal(lp.tokens.length, 3);
  assert.equal(lp.token_logprobs.length, 3);
  assert.equal(lp.top_logprobs.length, 3);
  assert.equal(lp.text_offset.length, 3);
  const chat = await client.chat.completions.create({
    model, messages: [{ role: "user", content: "Hi" }], max_tokens: 3, logprobs: true, top_logprobs: 2,
    temperature: 0, ignore_eos: true,
  });
  const content = chat.choices[0].logprobs.content;
  assert.equal(content.length, 3);
  for (const entry of content) {
    assert.equal(typeof entry.token, "string");
    assert.ok(entry.logprob <= 0);
    assert.equal(entry.top_logprobs.length, 2);
  }
});

test("errors come back as OpenAI errors", async () => {
  await assert.rejects(
    client.chat.completions.create({ model: "no-such-model", messages: [{ role: "user", content: "x" }] }),
    (e) => e.status === 404 && e.code === "model_not_found",
  );
  await assert.rejects(
    client.completions.create({ model, prompt: "x", temperature: -1 }),
    (e) => e.status === 400 && e.param === "temperature",
  );
});

test("a request aborted mid-stream", async () => {
  const controller = new AbortController();
  const stream = await client.completions.create(
    { model, prompt: "Once upon a time", max_tokens: 900, ignore_eos: true, stream: true },
    { signal: controller.signal },
  );
  let chunks = 0;
  try {
    for await (const _ of stream) {
      chunks += 1;
      if (chunks === 3) {
        // Chunks already buffered may still be yielded after abort(), so stop reading here.
        controller.abort();
        break;
      }
    }
  } catch (e) {
    assert.equal(e.name, "APIUserAbortError");
  }
  assert.equal(chunks, 3);
  // The server aborts the request: nothing keeps running and every KV block comes back.
  const metricsURL = baseURL.replace(/\/v1$/, "/metrics");
  let running = -1;
  let used = -1;
  for (let i = 0; i < 100 && !(running === 0 && used === 0); i++) {
    const text = await (await fetch(metricsURL)).text();
    running = Number(/^pagellm:num_requests_running\{[^}]*\} (\S+)$/m.exec(text)[1]);
    used = Number(/^pagellm:kv_cache_blocks_used\{[^}]*\} (\S+)$/m.exec(text)[1]);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  assert.equal(running, 0);
  assert.equal(used, 0);
});
