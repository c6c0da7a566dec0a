// The chat page: conversations in the sidebar, the current one in the middle, a reply streamed
// from /v1/chat/completions into its message as it comes. Plain DOM; the other modules hold no DOM.

import {ApiError, ChatApi} from './chat_api.js';
import {ConversationStore, UNTITLED, titleFrom} from './conversation_store.js';
import {renderMarkdown} from './markdown.js';
import {Reply} from './reply.js';
import {loadSettings, samplingFields, saveSettings} from './settings.js';

const $ = (id) => document.getElementById(id);
const settings = loadSettings();
const store = new ConversationStore();
const api = new ChatApi(() => settings.apiKey);
const narrowScreen = window.matchMedia('(max-width: 760px)');
const systemDark = window.matchMedia('(prefers-color-scheme: dark)');

// The messages on screen → their elements: a streaming reply updates its own element, and nothing
// while the user reads another conversation.
let views = new Map();
// While a reply streams: {controller (aborts the fetch), conversation, message, reply}.
let generation = null;
let updateScheduled = false;

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function button(label, className, onClick, title) {
  const node = element('button', className, label);
  node.type = 'button';
  if (title) {
    node.title = title;
    node.setAttribute('aria-label', title);
  }
  node.addEventListener('click', onClick);
  return node;
}

function showNotice(text) {
  $('notice').textContent = text;
  $('notice').hidden = !text;
}

// Runs a change that saves to localStorage; a full storage is told, not thrown.
function persist(change) {
  try {
    change();
  } catch (error) {
    showNotice(`Could not save in this browser's storage: ${error.message}`);
  }
}

// ---- theme ----

function applyTheme() {
  const dark = settings.theme === 'dark' || (settings.theme === 'auto' && systemDark.matches);
  document.documentElement.dataset.theme = dark ? 'dark' : 'light';
}

function toggleTheme() {
  settings.theme = document.documentElement.dataset.theme === 'dark' ? 'light' : 'dark';
  persist(() => saveSettings(settings));
  applyTheme();
}

// ---- API key ----

function askApiKey(reason) {
  const dialog = $('api-key-dialog');
  $('api-key-reason').textContent = reason;
  $('api-key-input').value = '';
  dialog.returnValue = '';
  dialog.showModal();
  return new Promise((resolve) => {
    dialog.addEventListener('close', () => resolve(dialog.returnValue === 'ok' ? $('api-key-input').value.trim() : ''),
                            {once: true});
  });
}

// Runs call(); on a 401 asks for the API key and runs it again, until it passes or the user cancels.
async function withApiKey(call) {
  for (;;) {
    try {
      return await call();
    } catch (error) {
      if (!(error instanceof ApiError) || error.status !== 401) throw error;
      const key = await askApiKey(settings.apiKey ? 'The server refused this API key. Enter the right one:'
                                                  : 'This server was started with --api-key. Enter the key:');
      if (!key) throw error;
      settings.apiKey = key;
      persist(() => saveSettings(settings));
    }
  }
}

// ---- models ----

async function loadModels() {
  try {
    const models = await withApiKey(() => api.listModels());
    $('model-picker').replaceChildren(...models.map((model) => new Option(model.id, model.id)));
    if (!models.some((model) => model.id === settings.model)) settings.model = models[0]?.id ?? '';
    $('model-picker').value = settings.model;
    showNotice('');
  } catch (error) {
    showNotice(`Could not list the models: ${error.message}`);
  }
  if (!store.current()?.messages.length) renderMessages();  // the empty state names the model
}

// ---- conversations (sidebar) ----

function renderConversationList() {
  $('conversation-list').replaceChildren(...store.list().map(conversationItem));
}

function conversationItem(conversation) {
  const item = element('li', 'conversation');
  item.dataset.id = conversation.id;
  item.classList.toggle('active', conversation.id === store.currentId);
  const open = button(conversation.title, 'conversation-open', () => openConversation(conversation.id));
  open.title = conversation.title;
  item.append(open,
              button('✎', 'icon conversation-rename', () => startRename(item, conversation), 'Rename'),
              button('×', 'icon conversation-delete', () => deleteConversation(conversation), 'Delete'));
  return item;
}

function startRename(item, conversation) {
  const input = element('input', 'conversation-title-input');
  input.value = conversation.title;
  input.setAttribute('aria-label', 'Conversation title');
  let finished = false;
  const finish = (keep) => {
    if (finished) return;
    finished = true;
    if (keep) persist(() => store.rename(conversation.id, input.value));
    renderConversationList();
    renderTitle();
  };
  input.addEventListener('keydown', (event) => {
    if (event.key === 'Enter') finish(true);
    else if (event.key === 'Escape') finish(false);
  });
  input.addEventListener('blur', () => finish(true));
  item.querySelector('.conversation-open').replaceWith(input);
  input.focus();
  input.select();
}

function deleteConversation(conversation) {
  if (!window.confirm(`Delete the conversation "${conversation.title}"?`)) return;
  if (generation?.conversation === conversation) generation.controller.abort();
  persist(() => store.remove(conversation.id));
  renderAll();
}

function openConversation(id) {
  persist(() => store.select(id));
  closeDrawer();
  renderAll();
}

// A new conversation is stored once its first message is sent: no empty ones pile up.
function newConversation() {
  persist(() => store.select(null));
  closeDrawer();
  renderAll();
  $('prompt').focus();
}

// ---- messages ----

function renderTitle() {
  const title = store.current()?.title ?? UNTITLED;
  $('chat-title').textContent = title;
  document.title = `${title} · pagellm`;
}

function renderMessages() {
  const container = $('messages');
  views = new Map();
  const conversation = store.current();
  if (!conversation || conversation.messages.length === 0) {
    const model = settings.model ? ` ${settings.model}` : '';
    container.replaceChildren(element('p', 'empty-state', `Send a message to start a conversation with${model}.`));
    return;
  }
  container.replaceChildren(...conversation.messages.map((message, index) => messageElement(conversation, message, index)));
  container.scrollTop = container.scrollHeight;
}

function messageElement(conversation, message, index) {
  const article = element('article', 'message');
  article.dataset.role = message.role;
  const bubble = element('div', 'bubble');
  const actions = element('div', 'message-actions');
  actions.append(button('Copy', 'copy-message', (event) => copyWithFeedback(event.currentTarget, message.content)));
  article.append(bubble, actions);
  views.set(message, article);
  if (message.role !== 'assistant') {
    bubble.textContent = message.content;  // the user's text, as typed
    return article;
  }
  const reasoning = element('details', 'reasoning');
  const summary = element('summary', '', 'Reasoning');
  summary.addEventListener('click', () => { reasoning.dataset.userToggled = '1'; });
  reasoning.append(summary, element('div', 'reasoning-text'));
  bubble.append(reasoning, element('div', 'content'), element('div', 'message-status'));
  if (index === conversation.messages.length - 1) {
    actions.append(button('Regenerate', 'regenerate', () => regenerate(conversation)));
  }
  const streaming = generation?.message === message;
  showAssistant(article, streaming ? streamingState(generation.reply) : storedState(message));
  return article;
}

function storedState(message) {
  const status = message.error ? `Error: ${message.error}`
                               : [message.stopped ? 'Stopped' : '', message.stats ?? ''].filter(Boolean).join(' · ');
  return {content: message.content, reasoning: message.reasoning ?? '', thinking: false, status,
          isError: Boolean(message.error), streaming: false};
}

function streamingState(reply) {
  return {...reply.view(), status: '', isError: false, streaming: true};
}

function showAssistant(article, state) {
  const reasoning = article.querySelector('.reasoning');
  reasoning.hidden = !state.reasoning;
  article.querySelector('.reasoning-text').textContent = state.reasoning;
  reasoning.querySelector('summary').textContent = state.thinking ? 'Thinking…' : 'Reasoning';
  if (reasoning.dataset.userToggled !== '1') reasoning.open = state.thinking;  // open while it thinks, folded after
  article.querySelector('.content').innerHTML = renderMarkdown(state.content);
  const status = article.querySelector('.message-status');
  status.textContent = state.status;
  status.hidden = !state.status;
  status.classList.toggle('error', state.isError);
  article.classList.toggle('streaming', state.streaming);
}

function nearBottom() {
  const container = $('messages');
  return container.scrollHeight - container.scrollTop - container.clientHeight < 80;
}

// Streamed deltas are drawn at most once a frame.
function scheduleStreamingUpdate() {
  if (updateScheduled) return;
  updateScheduled = true;
  requestAnimationFrame(() => {
    updateScheduled = false;
    const article = generation && views.get(generation.message);
    if (!article) return;
    const follow = nearBottom();
    showAssistant(article, streamingState(generation.reply));
    if (follow) $('messages').scrollTop = $('messages').scrollHeight;
  });
}

// The request's messages: the system prompt, then the conversation without failed replies.
function requestMessages(conversation) {
  const messages = [];
  if (settings.systemPrompt.trim()) messages.push({role: 'system', content: settings.systemPrompt});
  for (const message of conversation.messages) {
    if (message.role === 'assistant' && (message.error || !message.content)) continue;
    messages.push({role: message.role, content: message.content});
  }
  return messages;
}

async function send() {
  const text = $('prompt').value.trim();
  if (!text || generation) return;
  if (!settings.model) await loadModels();
  if (!settings.model) return;
  let conversation = store.current();
  persist(() => {
    conversation ??= store.create();
    if (conversation.messages.length === 0 && conversation.title === UNTITLED) conversation.title = titleFrom(text);
    conversation.messages.push({role: 'user', content: text});
  });
  $('prompt').value = '';
  fitPrompt();
  await streamReply(conversation);
}

function regenerate(conversation) {
  if (generation) return;
  const last = conversation.messages[conversation.messages.length - 1];
  if (last?.role === 'assistant') conversation.messages.pop();
  streamReply(conversation);
}

async function streamReply(conversation) {
  const messages = requestMessages(conversation);
  const message = {role: 'assistant', content: ''};
  conversation.messages.push(message);
  const controller = new AbortController();
  const reply = new Reply();
  generation = {controller, conversation, message, reply};
  persist(() => store.touch(conversation));
  setBusy(true);
  renderAll();
  try {
    await withApiKey(async () => {
      const request = {model: settings.model, messages, ...samplingFields(settings)};
      for await (const chunk of api.streamChat(request, controller.signal)) {
        reply.add(chunk);
        scheduleStreamingUpdate();
      }
    });
  } catch (error) {
    if (controller.signal.aborted) message.stopped = true;
    else message.error = error.message;
  }
  const {content, reasoning} = reply.view();
  message.content = content;
  if (reasoning) message.reasoning = reasoning;
  const stats = reply.stats();
  if (stats) message.stats = reply.finishReason === 'length' ? `${stats} · max tokens reached` : stats;
  generation = null;
  persist(() => store.touch(conversation));
  setBusy(false);
  if (views.has(message)) renderMessages();  // its Regenerate button and final state
  renderConversationList();
}

function stop() {
  generation?.controller.abort();
}

function setBusy(busy) {
  $('send').hidden = busy;
  $('stop').hidden = !busy;
}

function renderAll() {
  renderTitle();
  renderConversationList();
  renderMessages();
}

// ---- copying ----

async function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) {
    try {
      await navigator.clipboard.writeText(text);
      return true;
    } catch {
      // denied: fall back below
    }
  }
  // Plain http from another machine is no secure context: no Clipboard API there.
  const area = element('textarea', 'offscreen');
  area.value = text;
  document.body.append(area);
  area.select();
  const copied = document.execCommand('copy');
  area.remove();
  return copied;
}

async function copyWithFeedback(target, text) {
  const label = target.textContent;
  target.textContent = (await copyText(text)) ? 'Copied' : 'Copy failed';
  setTimeout(() => { target.textContent = label; }, 1200);
}

// ---- settings ----

function openSettings() {
  $('setting-system-prompt').value = settings.systemPrompt;
  $('setting-temperature').value = settings.temperature;
  $('setting-top-p').value = settings.topP;
  $('setting-max-tokens').value = settings.maxTokens;
  $('setting-theme').value = settings.theme;
  $('setting-api-key').value = settings.apiKey;
  $('settings-dialog').returnValue = '';
  $('settings-dialog').showModal();
}

function closeSettings() {
  if ($('settings-dialog').returnValue !== 'save') return;
  const keyChanged = settings.apiKey !== $('setting-api-key').value.trim();
  Object.assign(settings, {
    systemPrompt: $('setting-system-prompt').value,
    temperature: $('setting-temperature').value,
    topP: $('setting-top-p').value,
    maxTokens: $('setting-max-tokens').value,
    theme: $('setting-theme').value,
    apiKey: $('setting-api-key').value.trim(),
  });
  persist(() => saveSettings(settings));
  applyTheme();
  if (keyChanged) loadModels();
}

// ---- layout ----

function toggleSidebar() {
  if (narrowScreen.matches) $('layout').classList.toggle('drawer-open');
  else $('layout').classList.toggle('sidebar-closed');
}

function closeDrawer() {
  $('layout').classList.remove('drawer-open');
}

function fitPrompt() {
  const prompt = $('prompt');
  prompt.style.height = 'auto';
  prompt.style.height = `${prompt.scrollHeight + 2}px`;
}

function bindEvents() {
  $('composer').addEventListener('submit', (event) => {
    event.preventDefault();
    send();
  });
  $('prompt').addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      send();
    }
  });
  $('prompt').addEventListener('input', fitPrompt);
  $('stop').addEventListener('click', stop);
  $('new-chat').addEventListener('click', newConversation);
  $('toggle-sidebar').addEventListener('click', toggleSidebar);
  $('backdrop').addEventListener('click', closeDrawer);
  $('toggle-theme').addEventListener('click', toggleTheme);
  $('open-settings').addEventListener('click', openSettings);
  $('settings-dialog').addEventListener('close', closeSettings);
  $('model-picker').addEventListener('change', () => {
    settings.model = $('model-picker').value;
    persist(() => saveSettings(settings));
  });
  $('messages').addEventListener('click', (event) => {
    const copy = event.target.closest('.copy-code');
    if (copy) copyWithFeedback(copy, copy.closest('.code-block').querySelector('code').textContent);
  });
  systemDark.addEventListener('change', applyTheme);
  // Another tab of the page changed the conversations: show them (not while this tab streams).
  window.addEventListener('storage', () => {
    if (generation) return;
    store.load();
    renderAll();
  });
}

applyTheme();
bindEvents();
renderAll();
loadModels();
