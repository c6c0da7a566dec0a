// ConversationStore: the page's conversations, kept in localStorage (this browser only; the server
// keeps nothing). A conversation is {id, title, createdMs, updatedMs, messages: [{role, content,
// reasoning?, stats?, error?, stopped?}]}.

const STORAGE_KEY = 'pagellm.conversations.v1';
export const UNTITLED = 'New chat';
const TITLE_CHARS = 48;

function newId() {
  return crypto.randomUUID?.() ?? `${Date.now().toString(36)}-${Math.random().toString(36).slice(2)}`;
}

// The title a conversation gets from its first message: its first line, shortened.
export function titleFrom(text) {
  const line = text.trim().split('\n')[0].trim();
  return line.length > TITLE_CHARS ? `${line.slice(0, TITLE_CHARS - 1)}…` : line || UNTITLED;
}

export class ConversationStore {
  constructor(storage = window.localStorage) {
    this.storage = storage;
    this.conversations = [];
    this.currentId = null;
    this.load();
  }

  load() {
    try {
      const saved = JSON.parse(this.storage.getItem(STORAGE_KEY) ?? 'null');
      if (saved && Array.isArray(saved.conversations)) {
        this.conversations = saved.conversations;
        this.currentId = saved.currentId ?? null;
      }
    } catch {
      // unreadable (edited by hand): start empty rather than fail to load the page
    }
    if (!this.get(this.currentId)) this.currentId = null;
  }

  // Throws when the browser's storage is full: the caller tells the user.
  save() {
    this.storage.setItem(STORAGE_KEY, JSON.stringify({conversations: this.conversations, currentId: this.currentId}));
  }

  // Most recently updated first.
  list() {
    return [...this.conversations].sort((a, b) => b.updatedMs - a.updatedMs);
  }

  get(id) {
    return this.conversations.find((c) => c.id === id) ?? null;
  }

  current() {
    return this.get(this.currentId);
  }

  select(id) {
    this.currentId = this.get(id) ? id : null;
    this.save();
  }

  create() {
    const now = Date.now();
    const conversation = {id: newId(), title: UNTITLED, createdMs: now, updatedMs: now, messages: []};
    this.conversations.push(conversation);
    this.currentId = conversation.id;
    this.save();
    return conversation;
  }

  touch(conversation) {
    conversation.updatedMs = Date.now();
    this.save();
  }

  rename(id, title) {
    const conversation = this.get(id);
    if (!conversation || !title.trim()) return;
    conversation.title = title.trim();
    this.save();
  }

  remove(id) {
    this.conversations = this.conversations.filter((c) => c.id !== id);
    if (this.currentId === id) this.currentId = this.list()[0]?.id ?? null;
    this.save();
  }
}
