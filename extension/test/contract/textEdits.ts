/** Applies LSP text edits to a string, as an editor does (all ranges refer to the original text). */

export interface Position {
  line: number;
  character: number;
}

export interface TextEdit {
  range: { start: Position; end: Position };
  newText: string;
}

function offsetOf(text: string, position: Position): number {
  let offset = 0;
  for (let line = 0; line < position.line; line++) {
    const next = text.indexOf('\n', offset);
    if (next < 0) {
      return text.length;
    }
    offset = next + 1;
  }
  const lineEnd = text.indexOf('\n', offset);
  return Math.min(offset + position.character, lineEnd < 0 ? text.length : lineEnd);
}

export function applyTextEdits(text: string, edits: readonly TextEdit[]): string {
  const located = edits
    .map((edit) => ({
      start: offsetOf(text, edit.range.start),
      end: offsetOf(text, edit.range.end),
      newText: edit.newText,
    }))
    .sort((a, b) => b.start - a.start || b.end - a.end);
  let result = text;
  for (const edit of located) {
    result = result.slice(0, edit.start) + edit.newText + result.slice(edit.end);
  }
  return result;
}
