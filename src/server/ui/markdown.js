// Markdown of model replies to HTML. Every character of the input is HTML-escaped before any markup
// is added, so the only tags in the result are the ones written here, and links go only to http(s)
// and mailto. Covers what chat models write: fenced code (with a Copy button), inline code,
// headings, bold / italic / strikethrough, links, lists (nested by indentation), block quotes, GFM
// tables and rules. A fence still open (a reply that is streaming) runs to the end of the text.

const ESCAPES = {'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;'};

export function escapeHtml(text) {
  return text.replace(/[&<>"']/g, (c) => ESCAPES[c]);
}

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)[^`]*$/;
const HEADING = /^ {0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$/;
const RULE = /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/;
const QUOTE = /^ {0,3}> ?(.*)$/;
const LIST_ITEM = /^( *)([-*+]|\d{1,9}[.)])\s+(.*)$/;
const TABLE_DIVIDER = /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/;
const SAFE_URL = /^(https?:\/\/|mailto:)/i;

export function renderMarkdown(text) {
  // NUL marks stashed HTML in renderInline: none may come from the text.
  return renderBlocks(text.replace(/\r\n?/g, '\n').replace(/\0/g, '').split('\n'));
}

function indentOf(line) {
  return line.length - line.trimStart().length;
}

function renderBlocks(lines) {
  const out = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    let m;
    if (!line.trim()) i++;
    else if ((m = FENCE.exec(line))) i = renderFence(lines, i, m, out);
    else if ((m = HEADING.exec(line))) {
      out.push(`<h${m[1].length}>${renderInline(m[2])}</h${m[1].length}>`);
      i++;
    } else if (RULE.test(line)) {
      out.push('<hr>');
      i++;
    } else if (QUOTE.test(line)) i = renderQuote(lines, i, out);
    else if (LIST_ITEM.test(line)) i = renderList(lines, i, out);
    else if (isTableStart(lines, i)) i = renderTable(lines, i, out);
    else i = renderParagraph(lines, i, out);
  }
  return out.join('\n');
}

function startsBlock(lines, i) {
  const line = lines[i];
  return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) || LIST_ITEM.test(line) ||
         isTableStart(lines, i);
}

export function codeBlockHtml(code, language) {
  return '<div class="code-block"><div class="code-head">' +
         `<span class="code-lang">${escapeHtml(language)}</span>` +
         '<button type="button" class="copy-code">Copy</button></div>' +
         `<pre><code>${escapeHtml(code)}</code></pre></div>`;
}

function renderFence(lines, start, match, out) {
  const marker = match[1];
  const closing = new RegExp(`^ {0,3}${marker[0] === '`' ? '`' : '~'}{${marker.length},}\\s*$`);
  const body = [];
  let i = start + 1;
  while (i < lines.length && !closing.test(lines[i])) body.push(lines[i++]);
  out.push(codeBlockHtml(body.join('\n'), match[2]));
  return i + 1;
}

function renderQuote(lines, start, out) {
  const inner = [];
  let i = start;
  for (; i < lines.length && lines[i].trim(); i++) {
    const m = QUOTE.exec(lines[i]);
    inner.push(m ? m[1] : lines[i]);  // a line without '>' continues the quote's paragraph
  }
  out.push(`<blockquote>${renderBlocks(inner)}</blockquote>`);
  return i;
}

// Items are the lines at the first item's indentation (give or take one space); deeper lines
// belong to the item above them, with its indentation taken off, so a nested list renders inside.
function renderList(lines, start, out) {
  const first = LIST_ITEM.exec(lines[start]);
  const baseIndent = first[1].length;
  const ordered = /\d/.test(first[2]);
  const items = [];
  let i = start;
  for (; i < lines.length; i++) {
    const line = lines[i];
    const indent = indentOf(line);
    const item = LIST_ITEM.exec(line);
    if (item && indent <= baseIndent + 1 && !RULE.test(line)) {
      if (/\d/.test(item[2]) !== ordered) break;
      items.push({lines: [item[3]], contentIndent: indent + item[2].length + 1});
      continue;
    }
    const current = items[items.length - 1];
    if (!line.trim()) {
      const next = lines.slice(i + 1).find((l) => l.trim());
      if (next === undefined || indentOf(next) <= baseIndent && !LIST_ITEM.test(next)) break;
      current.lines.push('');
    } else if (indent > baseIndent) {
      current.lines.push(line.slice(Math.min(indent, current.contentIndent)));
    } else if (current.lines[current.lines.length - 1].trim() && !startsBlock(lines, i)) {
      current.lines.push(line.trimStart());  // a lazy continuation of the item's paragraph
    } else {
      break;
    }
  }
  const tag = ordered ? 'ol' : 'ul';
  const startNumber = ordered ? parseInt(first[2], 10) : 1;
  const startAttribute = startNumber !== 1 ? ` start="${startNumber}"` : '';
  out.push(`<${tag}${startAttribute}>${items.map((item) => `<li>${renderBlocks(item.lines)}</li>`).join('')}</${tag}>`);
  return i;
}

function isTableStart(lines, i) {
  return lines[i].includes('|') && i + 1 < lines.length && lines[i + 1].includes('|') &&
         lines[i + 1].includes('-') && TABLE_DIVIDER.test(lines[i + 1]);
}

function tableCells(line) {
  let row = line.trim();
  if (row.startsWith('|')) row = row.slice(1);
  if (row.endsWith('|') && !row.endsWith('\\|')) row = row.slice(0, -1);
  return row.split(/(?<!\\)\|/).map((cell) => cell.trim().replace(/\\\|/g, '|'));
}

function renderTable(lines, start, out) {
  const header = tableCells(lines[start]);
  const alignments = tableCells(lines[start + 1]).map((cell) =>
    cell.startsWith(':') && cell.endsWith(':') ? 'center' : cell.endsWith(':') ? 'right' : '');
  const cellHtml = (tag, text, column) => {
    const align = alignments[column] ? ` class="align-${alignments[column]}"` : '';
    return `<${tag}${align}>${renderInline(text)}</${tag}>`;
  };
  const rows = [];
  let i = start + 2;
  for (; i < lines.length && lines[i].trim() && lines[i].includes('|'); i++) {
    const cells = tableCells(lines[i]);
    rows.push(`<tr>${header.map((_, c) => cellHtml('td', cells[c] ?? '', c)).join('')}</tr>`);
  }
  out.push(`<div class="table-wrap"><table><thead><tr>${header.map((h, c) => cellHtml('th', h, c)).join('')}` +
           `</tr></thead><tbody>${rows.join('')}</tbody></table></div>`);
  return i;
}

function renderParagraph(lines, start, out) {
  const paragraph = [];
  let i = start;
  while (i < lines.length && lines[i].trim() && (i === start || !startsBlock(lines, i))) paragraph.push(lines[i++].trim());
  out.push(`<p>${paragraph.map(renderInline).join('<br>')}</p>`);
  return i;
}

function linkHtml(url, labelHtml) {
  return `<a href="${url}" target="_blank" rel="noopener noreferrer">${labelHtml}</a>`;
}

function renderEmphasis(html) {
  return html.replace(/\*\*(?=\S)([\s\S]*?\S)\*\*/g, '<strong>$1</strong>')
      .replace(/(^|[^\w])__(?=\S)([\s\S]*?\S)__(?!\w)/g, '$1<strong>$2</strong>')
      .replace(/~~(?=\S)([\s\S]*?\S)~~/g, '<del>$1</del>')
      .replace(/(^|[^*\w])\*(?=[^\s*])([^*]*?[^\s*])\*(?![*\w])/g, '$1<em>$2</em>')
      .replace(/(^|[^_\w])_(?=[^\s_])([^_]*?[^\s_])_(?![_\w])/g, '$1<em>$2</em>');
}

// One line of text: code spans and links are rendered first and set aside (as NUL-delimited
// indices), so emphasis never reaches into a code span or a URL.
function renderInline(text) {
  const stash = [];
  const keep = (html) => `\0${stash.push(html) - 1}\0`;
  let html = text.replace(/(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)/g, (_, ticks, code) => keep(`<code>${escapeHtml(code)}</code>`));
  html = escapeHtml(html);
  html = html.replace(/\[([^\]]+)\]\(([^()\s]+)\)/g, (whole, label, url) =>
    SAFE_URL.test(url) ? keep(linkHtml(url, renderEmphasis(label))) : label);
  html = html.replace(/(^|[\s(])(https?:\/\/(?:[^\s&<>"'\0]|&amp;)+?)(?=[.,:;!?)]*(?:\s|$))/g, (whole, before, url) =>
    before + keep(linkHtml(url, url)));
  html = renderEmphasis(html);
  for (let pass = 0; pass < 3 && html.includes('\0'); pass++) html = html.replace(/\0(\d+)\0/g, (_, n) => stash[n]);
  return html;
}
