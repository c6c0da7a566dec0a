// Drives the chat page of a running `pagellm serve` in headless Chromium (puppeteer-core, pinned in
// package.json; Debian's chromium) and checks what a user sees: the page loads without console
// errors, a message gets a user bubble and a streamed assistant reply, the settings go into the
// request, Stop aborts the request in the engine (/metrics), a reload keeps the conversations, new /
// rename / delete, copy, dark theme, the phone layout; with --api-key, the key prompt on 401.
//
//   node chat_page.mjs URL [--model NAME] [--api-key KEY] [--screenshot FILE.png]
//
// Run by tests/e2e/test_chat_page.cpp. Prints "ok NAME" per check; exits 1 on the first failure.
// PAGELLM_CHROMIUM names the browser (default /usr/bin/chromium).
import assert from 'node:assert/strict';
import {parseArgs} from 'node:util';

import puppeteer from 'puppeteer-core';

const {values: options, positionals} = parseArgs({
  allowPositionals: true,
  options: {
    'model': {type: 'string', default: 'test-model'},
    'api-key': {type: 'string'},
    'screenshot': {type: 'string'},
  },
});
const baseUrl = positionals[0]?.replace(/\/$/, '');
if (!baseUrl) {
  console.error('usage: node chat_page.mjs URL [--model NAME] [--api-key KEY] [--screenshot FILE.png]');
  process.exit(2);
}
const WAIT_MS = 20000;
const consoleErrors = [];  // console errors and uncaught exceptions of the page
// HTTP statuses the page is made to get on purpose: Chromium logs each as a console error.
const expectedStatuses = new Set();

// ---- helpers ----

async function metric(name, label = '') {
  const text = await (await fetch(`${baseUrl}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`pagellm:${name}{`) && l.includes(label));
  assert.ok(line, `metric pagellm:${name} ${label} missing`);
  return Number(line.slice(line.lastIndexOf(' ') + 1));
}

async function waitUntil(what, condition, timeoutMs = WAIT_MS) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await condition()) return;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

async function step(name, run) {
  const started = Date.now();
  await run();
  console.log(`ok ${name} (${Date.now() - started} ms)`);
}

const texts = (page, selector) => page.$$eval(selector, (nodes) => nodes.map((n) => n.textContent));
const isHidden = (page, selector) => page.$eval(selector, (n) => n.hidden);

async function typeInto(page, selector, text) {
  await page.$eval(selector, (node) => { node.value = ''; });
  await page.type(selector, text);
}

async function saveSettings(page, fields) {
  await page.click('#open-settings');
  await page.waitForSelector('#settings-dialog[open]');
  for (const [selector, value] of Object.entries(fields)) await typeInto(page, selector, value);
  await page.click('#settings-save');
  await page.waitForSelector('#settings-dialog:not([open])');
}

async function waitForModels(page) {
  await page.waitForFunction((model) => [...document.querySelectorAll('#model-picker option')].some((o) => o.value === model),
                             {timeout: WAIT_MS}, options.model);
}

async function sendMessage(page, text) {
  await typeInto(page, '#prompt', text);
  await page.keyboard.press('Enter');
}

// Waits until no reply streams; the reply's shown text and status.
async function waitForReply(page) {
  await page.waitForFunction(() => !document.querySelector('.message.streaming') && !document.querySelector('#send').hidden,
                             {timeout: WAIT_MS});
  return page.$$eval('[data-role="assistant"]', (nodes) => {
    const last = nodes[nodes.length - 1];
    return {content: last.querySelector('.content').textContent, status: last.querySelector('.message-status').textContent};
  });
}

// Counts the different texts the last assistant message shows while it streams.
async function watchStreaming(page) {
  await page.evaluate(() => {
    window.streamedTexts = new Set();
    window.stopShownWhileStreaming = undefined;
    new MutationObserver(() => {
      const streaming = document.querySelector('.message.streaming[data-role="assistant"] .content');
      if (!streaming || !streaming.textContent) return;
      window.streamedTexts.add(streaming.textContent);
      window.stopShownWhileStreaming ??= true;
      window.stopShownWhileStreaming &&= !document.querySelector('#stop').hidden && document.querySelector('#send').hidden;
    }).observe(document.querySelector('#messages'), {subtree: true, childList: true, characterData: true});
  });
}

// ---- checks ----

async function checkChat(page) {
  const chatRequests = [];
  page.on('request', (request) => {
    if (request.url().endsWith('/v1/chat/completions')) chatRequests.push(request);
  });

  await step('page loads with the model list and no console errors', async () => {
    const response = await page.goto(`${baseUrl}/`, {waitUntil: 'load'});
    assert.equal(response.status(), 200);
    assert.match(response.headers()['content-type'], /^text\/html/);
    await waitForModels(page);
    assert.equal(await page.$eval('#model-picker', (s) => s.value), options.model);
    assert.match(await page.$eval('.empty-state', (n) => n.textContent), new RegExp(options.model));
    assert.deepEqual(consoleErrors, []);
  });

  await step('a message gets a user bubble and a streamed assistant reply with the settings', async () => {
    await saveSettings(page, {'#setting-system-prompt': 'You are terse.', '#setting-temperature': '0',
                              '#setting-top-p': '0.9', '#setting-max-tokens': '64'});
    await watchStreaming(page);
    await sendMessage(page, 'Hello there');
    await page.waitForSelector('[data-role="user"]');
    assert.deepEqual(await texts(page, '[data-role="user"] .bubble'), ['Hello there']);
    const reply = await waitForReply(page);
    assert.ok(reply.content.length > 0, 'the reply has text');
    assert.match(reply.status, /^64 tokens( · [\d.]+ tok\/s)? · max tokens reached$/);
    const shown = await page.evaluate(() => [...window.streamedTexts]);
    assert.ok(shown.length >= 3, `the reply grew in steps while streaming (${shown.length} texts seen)`);
    assert.ok(shown.every((text, i) => i === 0 || text.length >= shown[i - 1].length));
    assert.equal(await page.evaluate(() => window.stopShownWhileStreaming), true, 'Stop replaces Send while it streams');
    const body = JSON.parse(chatRequests[0].postData());
    assert.equal(body.model, options.model);
    assert.equal(body.stream, true);
    assert.equal(body.temperature, 0);
    assert.equal(body.top_p, 0.9);
    assert.equal(body.max_tokens, 64);
    assert.deepEqual(body.messages, [{role: 'system', content: 'You are terse.'}, {role: 'user', content: 'Hello there'}]);
    assert.equal(await page.$eval('.conversation.active .conversation-open', (n) => n.textContent), 'Hello there');
  });

  await step('the second turn sends the conversation so far', async () => {
    const firstReply = (await texts(page, '[data-role="assistant"] .content'))[0];
    await sendMessage(page, 'And then?');
    await waitForReply(page);
    assert.equal(await page.$$eval('[data-role]', (nodes) => nodes.map((n) => n.dataset.role).join(' ')),
                 'user assistant user assistant');
    const body = JSON.parse(chatRequests[1].postData());
    assert.deepEqual(body.messages.map((m) => m.role), ['system', 'user', 'assistant', 'user']);
    assert.equal(body.messages[2].content, firstReply);
  });

  if (options.screenshot) {
    await page.screenshot({path: options.screenshot});
    console.log(`  screenshot: ${options.screenshot}`);
  }

  await step('Stop aborts a long reply and the engine frees the request', async () => {
    const abortsBefore = await metric('request_success_total', 'finished_reason="abort"');
    const tokensBefore = await metric('generation_tokens_total');
    await page.click('#new-chat');
    await page.waitForSelector('.empty-state');
    await saveSettings(page, {'#setting-max-tokens': '900'});
    await sendMessage(page, 'Tell me a very long story');
    await page.waitForFunction(() => document.querySelector('.message.streaming .content')?.textContent.length > 0,
                               {timeout: WAIT_MS});
    assert.equal(await metric('num_requests_running'), 1);
    const stopMs = Date.now();
    await page.click('#stop');
    await waitUntil('the engine to abort the request',
                    async () => await metric('request_success_total', 'finished_reason="abort"') === abortsBefore + 1 &&
                                await metric('num_requests_running') === 0);
    console.log(`  the engine counted the abort ${Date.now() - stopMs} ms after Stop`);
    const tokens = await metric('generation_tokens_total') - tokensBefore;
    assert.ok(tokens > 0 && tokens < 900, `the long reply stopped early (${tokens} of 900 tokens)`);
    console.log(`  ${tokens} of 900 tokens generated`);
    assert.equal(await metric('kv_cache_blocks_used'), 0, 'no KV cache block is held after the abort');
    const reply = await waitForReply(page);
    assert.ok(reply.content.length > 0, 'the text streamed before Stop is kept');
    assert.equal(reply.status, 'Stopped');
    assert.equal(await isHidden(page, '#stop'), true);
  });

  await step('a reload keeps the conversations and the open one', async () => {
    const before = await page.$$eval('[data-role]', (nodes) => nodes.map((n) => [n.dataset.role, n.querySelector('.bubble').textContent]));
    const titles = await texts(page, '.conversation-open');
    await page.reload({waitUntil: 'load'});
    await waitForModels(page);
    assert.deepEqual(await texts(page, '.conversation-open'), titles);
    assert.deepEqual(titles, ['Tell me a very long story', 'Hello there']);
    assert.deepEqual(await page.$$eval('[data-role]', (nodes) => nodes.map((n) => [n.dataset.role, n.querySelector('.bubble').textContent])),
                     before);
    await page.click('.conversation:nth-child(2) .conversation-open');
    await page.waitForFunction(() => document.querySelectorAll('[data-role]').length === 4, {timeout: WAIT_MS});
    assert.equal(await page.$eval('#chat-title', (n) => n.textContent), 'Hello there');
    // Settings are kept too.
    assert.equal(await page.evaluate(() => JSON.parse(localStorage.getItem('pagellm.settings.v1')).maxTokens), '900');
  });

  await step('copy puts a message on the clipboard', async () => {
    await page.click('[data-role="user"] .copy-message');
    await page.waitForFunction(() => document.querySelector('[data-role="user"] .copy-message').textContent === 'Copied',
                               {timeout: WAIT_MS});
    assert.equal(await page.evaluate(() => navigator.clipboard.readText()), 'Hello there');
  });

  await step('new, rename and delete conversations (kept across a reload)', async () => {
    await page.click('#new-chat');
    await page.waitForSelector('.empty-state');
    assert.equal(await page.$eval('#chat-title', (n) => n.textContent), 'New chat');
    assert.equal((await texts(page, '.conversation-open')).length, 2, 'an unsent new chat is not stored');
    // A request the server refuses (prompt + max_tokens over --max-model-len): its error shows in the reply.
    await saveSettings(page, {'#setting-max-tokens': '5000'});
    expectedStatuses.add(400);
    await sendMessage(page, 'Third one');
    const refused = await waitForReply(page);
    expectedStatuses.delete(400);
    assert.match(refused.status, /^Error: .*max_tokens/);
    await saveSettings(page, {'#setting-max-tokens': '4'});
    await page.click('[data-role="assistant"] .regenerate');
    assert.match((await waitForReply(page)).status, /^4 tokens/);
    assert.equal(await page.$$eval('[data-role]', (nodes) => nodes.length), 2, 'Regenerate replaced the failed reply');
    // Most recently updated first.
    assert.deepEqual(await texts(page, '.conversation-open'), ['Third one', 'Tell me a very long story', 'Hello there']);

    await page.click('.conversation:nth-child(2) .conversation-rename');
    await page.waitForSelector('.conversation-title-input');
    await typeInto(page, '.conversation-title-input', 'Greetings');
    await page.keyboard.press('Enter');
    await page.waitForFunction(() => !document.querySelector('.conversation-title-input'), {timeout: WAIT_MS});
    assert.deepEqual(await texts(page, '.conversation-open'), ['Third one', 'Greetings', 'Hello there']);

    page.once('dialog', (dialog) => dialog.accept());
    await page.click('.conversation:nth-child(1) .conversation-delete');
    await page.waitForFunction(() => document.querySelectorAll('.conversation').length === 2, {timeout: WAIT_MS});

    await page.reload({waitUntil: 'load'});
    await waitForModels(page);
    assert.deepEqual(await texts(page, '.conversation-open'), ['Greetings', 'Hello there']);
  });

  // The test model's random weights never think nor write Markdown: a canned stream stands in for
  // the server here, to show how the page presents what a real model sends.
  await step('reasoning_content is folded above the answer; code blocks copy (canned SSE stream)', async () => {
    const events = [{role: 'assistant', content: ''}, {reasoning_content: 'The user wants '},
                    {reasoning_content: 'a loop.'}, {content: 'Here:\n\n```c\nfor (int i = 0; i < 3; i++) {}\n'},
                    {content: '```\n'}]
                       .map((delta) => ({choices: [{index: 0, delta, finish_reason: null}]}));
    events.push({choices: [{index: 0, delta: {}, finish_reason: 'stop'}]});
    events.push({choices: [], usage: {prompt_tokens: 9, completion_tokens: 20, total_tokens: 29}});
    const body = `${events.map((event) => `data: ${JSON.stringify(event)}\n\n`).join('')}data: [DONE]\n\n`;
    const canned = (request) => {
      if (request.url().endsWith('/v1/chat/completions')) request.respond({status: 200, contentType: 'text/event-stream', body});
      else request.continue();
    };
    await page.setRequestInterception(true);
    page.on('request', canned);
    await page.click('#new-chat');
    await sendMessage(page, 'A loop in C?');
    const reply = await waitForReply(page);
    page.off('request', canned);
    await page.setRequestInterception(false);
    assert.equal(reply.status, '20 tokens');
    const shown = () => page.$eval('[data-role="assistant"]', (node) => ({
      reasoningShown: !node.querySelector('.reasoning').hidden,
      reasoningOpen: node.querySelector('.reasoning').open,
      reasoning: node.querySelector('.reasoning-text').textContent,
      paragraph: node.querySelector('.content p').textContent,
      code: node.querySelector('.content .code-block code').textContent,
      language: node.querySelector('.content .code-lang').textContent,
    }));
    const expected = {reasoningShown: true, reasoningOpen: false, reasoning: 'The user wants a loop.', paragraph: 'Here:',
                      code: 'for (int i = 0; i < 3; i++) {}', language: 'c'};
    assert.deepEqual(await shown(), expected);
    await page.click('[data-role="assistant"] .reasoning summary');
    assert.equal(await page.$eval('[data-role="assistant"] .reasoning', (node) => node.open), true);
    await page.click('[data-role="assistant"] .copy-code');
    await page.waitForFunction(() => document.querySelector('.copy-code').textContent === 'Copied', {timeout: WAIT_MS});
    assert.equal(await page.evaluate(() => navigator.clipboard.readText()), expected.code);
    await page.reload({waitUntil: 'load'});
    assert.deepEqual(await shown(), expected);
  });

  await step('the theme switches between light and dark', async () => {
    const background = () => page.evaluate(() => getComputedStyle(document.body).backgroundColor);
    const first = await page.evaluate(() => document.documentElement.dataset.theme);
    const firstBackground = await background();
    await page.click('#toggle-theme');
    assert.equal(await page.evaluate(() => document.documentElement.dataset.theme), first === 'dark' ? 'light' : 'dark');
    assert.notEqual(await background(), firstBackground);
    await page.reload({waitUntil: 'load'});
    assert.equal(await page.evaluate(() => document.documentElement.dataset.theme), first === 'dark' ? 'light' : 'dark');
  });

  await step('on a phone the sidebar is a drawer and nothing overflows sideways', async () => {
    await page.setViewport({width: 390, height: 844, isMobile: true, hasTouch: true, deviceScaleFactor: 2});
    await page.reload({waitUntil: 'load'});
    await waitForModels(page);
    const sidebarRight = () => page.$eval('#sidebar', (n) => n.getBoundingClientRect().right);
    assert.ok(await sidebarRight() <= 0, 'the drawer starts closed');
    assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth));
    const composer = await page.$eval('#composer', (n) => n.getBoundingClientRect().bottom);
    assert.ok(composer <= 844, 'the composer is on screen');
    await page.click('#toggle-sidebar');
    await waitUntil('the drawer to open', async () => await sidebarRight() > 200);
    const items = await page.$$('.conversation-open');
    const titles = await texts(page, '.conversation-open');
    await items[titles.indexOf('Hello there')].click();
    await waitUntil('the drawer to close', async () => await sidebarRight() <= 0);
    assert.equal(await page.$eval('#chat-title', (n) => n.textContent), 'Hello there');
  });
}

// A server with --api-key: the page itself loads, its /v1 calls ask for the key and carry it.
async function checkApiKey(page) {
  let authorization = null;
  page.on('request', (request) => {
    if (request.url().endsWith('/v1/chat/completions')) authorization = request.headers().authorization;
  });
  expectedStatuses.add(401);
  await step('the page loads without a key and asks for it', async () => {
    const response = await page.goto(`${baseUrl}/`, {waitUntil: 'load'});
    assert.equal(response.status(), 200);
    await page.waitForSelector('#api-key-dialog[open]', {timeout: WAIT_MS});
    assert.match(await page.$eval('#api-key-reason', (n) => n.textContent), /--api-key/);
  });
  await step('a wrong key is refused and asked again', async () => {
    await page.type('#api-key-input', 'wrong-key');
    await page.keyboard.press('Enter');
    await page.waitForFunction(() => /refused/.test(document.querySelector('#api-key-reason').textContent) &&
                                     document.querySelector('#api-key-dialog').open, {timeout: WAIT_MS});
  });
  await step('the right key lists the models and chats', async () => {
    await page.type('#api-key-input', options['api-key']);
    await page.click('#api-key-ok');
    await waitForModels(page);
    await saveSettings(page, {'#setting-max-tokens': '6'});
    await sendMessage(page, 'Hi');
    const reply = await waitForReply(page);
    assert.match(reply.status, /^6 tokens/);
    assert.equal(authorization, `Bearer ${options['api-key']}`);
  });
}

const browser = await puppeteer.launch({
  executablePath: process.env.PAGELLM_CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
});
let failed = false;
try {
  const context = browser.defaultBrowserContext();
  await context.overridePermissions(baseUrl, ['clipboard-read', 'clipboard-write', 'clipboard-sanitized-write']);
  const page = await browser.newPage();
  await page.setViewport({width: 1100, height: 720});
  page.on('console', (message) => {
    if (message.type() !== 'error') return;
    const status = /status of (\d+)/.exec(message.text());
    if (status && expectedStatuses.has(Number(status[1]))) return;
    consoleErrors.push(message.text());
  });
  page.on('pageerror', (error) => consoleErrors.push(`uncaught: ${error.message}`));
  if (options['api-key']) await checkApiKey(page);
  else await checkChat(page);
  await step('no console errors', async () => assert.deepEqual(consoleErrors, []));
} catch (error) {
  failed = true;
  console.log(`not ok: ${error.stack ?? error}`);
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);
