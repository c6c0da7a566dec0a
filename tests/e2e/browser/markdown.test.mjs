// The chat page's Markdown renderer and reply assembly (src/server/ui/markdown.js, reply.js) under
// node's test runner: what they render, and that no input gets a tag or attribute of its own into
// the page. Run by tests/e2e/test_chat_page.cpp, or: node --test markdown.test.mjs
import assert from 'node:assert/strict';
import {readFileSync} from 'node:fs';
import {test} from 'node:test';

// The page's files are browser modules without a package.json: load them by their text.
async function pageModule(name) {
  const source = readFileSync(new URL(`../../../src/server/ui/${name}`, import.meta.url), 'utf8');
  return import(`data:text/javascript;base64,${Buffer.from(source).toString('base64')}`);
}
const {renderMarkdown} = await pageModule('markdown.js');
const {Reply, splitThinking} = await pageModule('reply.js');

const ALLOWED_TAGS = new Set(['p', 'br', 'h1', 'h2', 'h3', 'h4', 'h5', 'h6', 'hr', 'blockquote', 'ul', 'ol', 'li',
  'strong', 'em', 'del', 'code', 'pre', 'a', 'div', 'span', 'button', 'table', 'thead', 'tbody', 'tr', 'th', 'td']);
const ALLOWED_ATTRIBUTES = new Set(['class', 'href', 'target', 'rel', 'type', 'start']);

// Every tag of `html` is one the renderer writes, with only its attributes, quoted, and any href
// is http(s) or mailto.
function assertOnlyOwnMarkup(html, input) {
  for (const [, name, attributes] of html.matchAll(/<\/?([A-Za-z][\w-]*)([^>]*)>/g)) {
    assert.ok(ALLOWED_TAGS.has(name), `tag <${name}> from ${JSON.stringify(input)}`);
    const rest = attributes.replace(/\s([a-z]+)="([^"]*)"/g, (_, attribute, value) => {
      assert.ok(ALLOWED_ATTRIBUTES.has(attribute), `attribute ${attribute} from ${JSON.stringify(input)}`);
      if (attribute === 'href') assert.match(value, /^(https?:\/\/|mailto:)/i);
      return '';
    });
    assert.match(rest, /^\s*\/?$/, `stray attribute text "${rest}" from ${JSON.stringify(input)}`);
  }
  assert.doesNotMatch(html.replace(/<[^>]*>/g, ''), /[<>"]/, `an unescaped character from ${JSON.stringify(input)}`);
}

test('HTML in the text is shown as text', () => {
  const html = renderMarkdown('<script>alert(1)</script> and <img src=x onerror="alert(2)">');
  assert.equal(html, '<p>&lt;script&gt;alert(1)&lt;/script&gt; and &lt;img src=x onerror=&quot;alert(2)&quot;&gt;</p>');
});

test('links go only to http(s) and mailto, and cannot break out of href', () => {
  assert.equal(renderMarkdown('[site](https://example.com/a_b_c?x=1&y=2)'),
               '<p><a href="https://example.com/a_b_c?x=1&amp;y=2" target="_blank" rel="noopener noreferrer">site</a></p>');
  assert.equal(renderMarkdown('[click](javascript:alert`1`)'), '<p>click</p>');
  assert.equal(renderMarkdown('[click](javascript:alert(1))'), '<p>[click](javascript:alert(1))</p>');
  assert.equal(renderMarkdown('[x](https://e.com/"onmouseover="alert)'),
               '<p><a href="https://e.com/&quot;onmouseover=&quot;alert" target="_blank" rel="noopener noreferrer">x</a></p>');
  assert.equal(renderMarkdown('see https://example.com/x_y.'),
               '<p>see <a href="https://example.com/x_y" target="_blank" rel="noopener noreferrer">https://example.com/x_y</a>.</p>');
});

test('fenced code keeps its text, escaped, under a language label and a Copy button', () => {
  assert.equal(renderMarkdown('Run:\n```python\nif a < b and c:\n    print("*hi*")\n```\nDone.'),
               '<p>Run:</p>\n<div class="code-block"><div class="code-head"><span class="code-lang">python</span>' +
               '<button type="button" class="copy-code">Copy</button></div><pre><code>if a &lt; b and c:\n' +
               '    print(&quot;*hi*&quot;)</code></pre></div>\n<p>Done.</p>');
});

test('a fence still open (a streaming reply) runs to the end', () => {
  const html = renderMarkdown('```js\nconst x = 1;\n# not a heading');
  assert.match(html, /<pre><code>const x = 1;\n# not a heading<\/code><\/pre>/);
  assert.doesNotMatch(html, /<h1>/);
});

test('inline markup: code, bold, italic, strikethrough', () => {
  assert.equal(renderMarkdown('Use `a*b*c` with **bold**, *it*, _it2_ and ~~gone~~; snake_case_name stays.'),
               '<p>Use <code>a*b*c</code> with <strong>bold</strong>, <em>it</em>, <em>it2</em> and <del>gone</del>; ' +
               'snake_case_name stays.</p>');
  assert.equal(renderMarkdown('2 * 3 * 4'), '<p>2 * 3 * 4</p>');
});

test('headings, rules, quotes and line breaks', () => {
  assert.equal(renderMarkdown('# Title\n## Sub ##\ntext\nmore\n\n---\n> quoted\n> **too**'),
               '<h1>Title</h1>\n<h2>Sub</h2>\n<p>text<br>more</p>\n<hr>\n<blockquote><p>quoted<br><strong>too</strong></p></blockquote>');
});

test('lists: bullets, numbers with their start, nesting by indentation', () => {
  assert.equal(renderMarkdown('- one\n- two\n  - two.a\n  - two.b\n- three'),
               '<ul><li><p>one</p></li><li><p>two</p>\n<ul><li><p>two.a</p></li><li><p>two.b</p></li></ul></li>' +
               '<li><p>three</p></li></ul>');
  assert.equal(renderMarkdown('3. c\n4. d\n\nafter'), '<ol start="3"><li><p>c</p></li><li><p>d</p></li></ol>\n<p>after</p>');
  assert.equal(renderMarkdown('1. step\n   ```sh\n   make\n   ```\n2. next'),
               '<ol><li><p>step</p>\n<div class="code-block"><div class="code-head"><span class="code-lang">sh</span>' +
               '<button type="button" class="copy-code">Copy</button></div><pre><code>make</code></pre></div></li>' +
               '<li><p>next</p></li></ol>');
});

test('tables with alignment', () => {
  assert.equal(renderMarkdown('| Name | Score | Note |\n|:--|--:|:-:|\n| `x` | 1 |\n| c \\| d | 22 | **ok** | extra |'),
               '<div class="table-wrap"><table><thead><tr><th>Name</th><th class="align-right">Score</th>' +
               '<th class="align-center">Note</th></tr></thead><tbody>' +
               '<tr><td><code>x</code></td><td class="align-right">1</td><td class="align-center"></td></tr>' +
               '<tr><td>c | d</td><td class="align-right">22</td><td class="align-center"><strong>ok</strong></td></tr>' +
               '</tbody></table></div>');
});

test('no input gets markup of its own into the page', () => {
  const pieces = ['<', '>', '"', "'", '&', '`', '```', '*', '**', '_', '~~', '[', ']', '(', ')', 'http://a', 'javascript:',
                  '|', '---', '\n', '\n\n', '- ', '1. ', '> ', '# ', '  ', 'x', 'on', '=', '\0', '<think>', '\\'];
  let seed = 7;
  const random = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
  for (let round = 0; round < 3000; round++) {
    let input = '';
    const length = 1 + Math.floor(random() * 30);
    for (let i = 0; i < length; i++) input += pieces[Math.floor(random() * pieces.length)];
    assertOnlyOwnMarkup(renderMarkdown(input), input);
  }
});

test('thinking written inline is split from the answer', () => {
  assert.deepEqual(splitThinking('<think>\nLet me see.\n</think>\n\nIt is 4.'),
                   {reasoning: 'Let me see.', content: 'It is 4.', thinking: false});
  // The template opened the block in the prompt (Qwen3): only the closing tag is in the reply.
  assert.deepEqual(splitThinking('Let me see.</think>It is 4.'), {reasoning: 'Let me see.', content: 'It is 4.', thinking: false});
  assert.deepEqual(splitThinking('<think>Still'), {reasoning: 'Still', content: '', thinking: true});
  assert.deepEqual(splitThinking('Plain answer.'), {reasoning: '', content: 'Plain answer.', thinking: false});
});

test('a reply gathers content and reasoning_content deltas and the usage', () => {
  const reply = new Reply();
  const chunk = (delta, extra = {}) => ({choices: [{index: 0, delta, finish_reason: null}], ...extra});
  reply.add(chunk({role: 'assistant', content: ''}));
  reply.add(chunk({reasoning_content: 'Think'}));
  assert.deepEqual(reply.view(), {content: '', reasoning: 'Think', thinking: true});
  reply.add(chunk({reasoning_content: 'ing.'}));
  reply.add(chunk({content: 'An'}));
  reply.add({choices: [{index: 0, delta: {content: 'swer'}, finish_reason: 'stop'}]});
  reply.add({choices: [], usage: {prompt_tokens: 5, completion_tokens: 1, total_tokens: 6}});
  assert.deepEqual(reply.view(), {content: 'Answer', reasoning: 'Thinking.', thinking: false});
  assert.equal(reply.finishReason, 'stop');
  assert.equal(reply.stats(), '1 token');
});
