// ChatApi: the page's calls to the server (same origin, relative URLs, so the page also works
// behind a proxy under a sub-path): the model list and streamed chat completions (SSE).

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function apiError(response) {
  let message = `${response.status} ${response.statusText}`;
  try {
    const body = await response.json();
    if (body?.error?.message) message = body.error.message;
  } catch {
    // not JSON: keep the status line
  }
  return new ApiError(response.status, message);
}

// The data of each server-sent event of `stream`, parsed, up to "[DONE]".
async function* serverSentEvents(stream) {
  const reader = stream.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const {value, done} = await reader.read();
    if (done) return;
    buffer += value;
    for (let end; (end = buffer.search(/\r?\n\r?\n/)) >= 0;) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end).replace(/^\r?\n\r?\n/, '');
      const data = event.split(/\r?\n/).filter((line) => line.startsWith('data:'))
                       .map((line) => line.slice(5).replace(/^ /, '')).join('\n');
      if (!data) continue;
      if (data === '[DONE]') return;
      const parsed = JSON.parse(data);
      if (parsed.error) throw new ApiError(parsed.error.code ?? 500, parsed.error.message ?? 'server error');
      yield parsed;
    }
  }
}

export class ChatApi {
  // apiKey(): the key to send ('' for none), read at each call.
  constructor(apiKey) {
    this.apiKey = apiKey;
  }

  headers() {
    const headers = {'Content-Type': 'application/json'};
    const key = this.apiKey();
    if (key) headers.Authorization = `Bearer ${key}`;
    return headers;
  }

  async listModels() {
    const response = await fetch('v1/models', {headers: this.headers()});
    if (!response.ok) throw await apiError(response);
    return (await response.json()).data.map((model) => ({id: model.id, maxModelLen: model.max_model_len}));
  }

  // Yields the chunks of one streamed chat completion. Aborting `signal` closes the connection,
  // which aborts the request in the engine and frees its KV cache.
  async* streamChat(body, signal) {
    const response = await fetch('v1/chat/completions', {
      method: 'POST',
      headers: this.headers(),
      body: JSON.stringify({...body, stream: true, stream_options: {include_usage: true}}),
      signal,
    });
    if (!response.ok) throw await apiError(response);
    yield* serverSentEvents(response.body);
  }
}
