// Reply: one assistant answer as its stream of chat.completion.chunk events builds it up.
// Reasoning comes either as `reasoning_content` (or `reasoning`) deltas, when the server runs a
// reasoning parser, or inline in the text as <think>…</think>; both end up in `reasoning`.

const THINK_OPEN = '<think>';
const THINK_CLOSE = '</think>';
const MIN_TIMED_SECONDS = 0.05;

// "<think>R</think>A" → {reasoning: R, content: A}. A chat template that opens the think block in
// the prompt (Qwen3's) leaves only "R</think>A". While the block is open, `thinking` is true.
export function splitThinking(text) {
  const open = /^\s*<think>/.exec(text);
  const body = open ? text.slice(open[0].length) : text;
  const close = body.indexOf(THINK_CLOSE);
  if (close >= 0 && !body.slice(0, close).includes(THINK_OPEN))
    return {reasoning: body.slice(0, close).trim(), content: body.slice(close + THINK_CLOSE.length).trimStart(), thinking: false};
  if (open) return {reasoning: body.trim(), content: '', thinking: true};
  return {reasoning: '', content: text, thinking: false};
}

export class Reply {
  constructor() {
    this.text = '';             // content deltas, as sent
    this.reasoningDeltas = '';  // reasoning_content deltas
    this.finishReason = null;
    this.usage = null;
    this.startedMs = performance.now();
    this.firstTokenMs = null;
    this.lastTokenMs = null;
  }

  add(chunk) {
    if (chunk.usage) this.usage = chunk.usage;
    for (const choice of chunk.choices ?? []) {
      const delta = choice.delta ?? {};
      const reasoning = delta.reasoning_content ?? delta.reasoning;
      if (typeof reasoning === 'string') this.reasoningDeltas += reasoning;
      if (typeof delta.content === 'string') this.text += delta.content;
      if (reasoning || delta.content) {
        this.lastTokenMs = performance.now();
        this.firstTokenMs ??= this.lastTokenMs;
      }
      if (choice.finish_reason) this.finishReason = choice.finish_reason;
    }
  }

  // {content, reasoning, thinking}: what the page shows and keeps.
  view() {
    const inline = splitThinking(this.text);
    const reasoning = [this.reasoningDeltas.trim(), inline.reasoning].filter(Boolean).join('\n\n');
    const thinking = inline.thinking || (!this.text && this.reasoningDeltas !== '');
    return {content: inline.content, reasoning, thinking};
  }

  // "42 tokens · 35.2 tok/s" once the server sent usage; generation speed from the first token on,
  // left out when the tokens came too close together to time (a short reply read in one piece).
  stats() {
    if (!this.usage) return '';
    const tokens = this.usage.completion_tokens;
    const seconds = this.firstTokenMs !== null ? (this.lastTokenMs - this.firstTokenMs) / 1000 : 0;
    const speed = seconds >= MIN_TIMED_SECONDS && tokens > 1 ? ` · ${((tokens - 1) / seconds).toFixed(1)} tok/s` : '';
    return `${tokens} token${tokens === 1 ? '' : 's'}${speed}`;
  }
}
