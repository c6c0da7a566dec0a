// Settings of the page, kept in localStorage: the model, the sampling fields sent with each request
// (blank = the server's default, which is the model's generation_config.json when it has one), the
// theme and the API key the user typed for a server started with --api-key.

const STORAGE_KEY = 'pagellm.settings.v1';

export const DEFAULT_SETTINGS = {
  model: '',
  systemPrompt: '',
  temperature: '',
  topP: '',
  maxTokens: '',
  theme: 'auto',  // auto (the system's), light, dark
  apiKey: '',
};

export function loadSettings(storage = window.localStorage) {
  try {
    return {...DEFAULT_SETTINGS, ...JSON.parse(storage.getItem(STORAGE_KEY) ?? '{}')};
  } catch {
    return {...DEFAULT_SETTINGS};
  }
}

export function saveSettings(settings, storage = window.localStorage) {
  storage.setItem(STORAGE_KEY, JSON.stringify(settings));
}

// The sampling fields of a chat request: only those the user set.
export function samplingFields(settings) {
  const fields = {};
  const number = (text) => (String(text).trim() === '' ? null : Number(text));
  const temperature = number(settings.temperature);
  const topP = number(settings.topP);
  const maxTokens = number(settings.maxTokens);
  if (temperature !== null && Number.isFinite(temperature)) fields.temperature = temperature;
  if (topP !== null && Number.isFinite(topP)) fields.top_p = topP;
  if (maxTokens !== null && Number.isInteger(maxTokens)) fields.max_tokens = maxTokens;
  return fields;
}
