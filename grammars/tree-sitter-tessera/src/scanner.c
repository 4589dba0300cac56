/*
 * External scanner for tree-sitter-tessera.
 *
 * Tokens (same order as `externals` in grammar.js):
 *   NEWLINE  zero-width, at the end of a line that holds code (outside brackets)
 *   INDENT   zero-width, at the end of a block header line whose next code line is
 *            indented deeper (emitted instead of NEWLINE)
 *   DEDENT   zero-width, at the end of the last line of a block
 *   NL       an extra: the line break itself plus any following blank lines and the
 *            next line's indentation (or, at the start of the file, the leading
 *            blank lines and indentation)
 *   ( ) [ ] { }  the brackets, so that the scanner knows the bracket depth and never
 *            has to guess it from the parse state
 *
 * Every line break outside brackets is consumed by exactly one NL, so the scanner
 * always knows whether the current line holds code (LINE_CODE) or only a comment
 * (LINE_COMMENT), and a newline after code always ends the statement, whatever the
 * parse state expects (`x = <newline>` is a syntax error, as in Python).
 *
 * Comment-only and blank lines never produce INDENT/DEDENT: the indentation that
 * counts is the next code line's. A comment line less indented than the current
 * block is put after the block's DEDENTs only when the code after it is less
 * indented too (so commented-out code at column 0 inside a function stays inside).
 *
 * Tabs advance the indentation to the next multiple of 8 (the frontend reports them).
 * The state is small and bounded: at most MAX_DEPTH indentation levels are tracked;
 * deeper INDENTs are not produced (the parser reports a syntax error instead).
 */

#include "tree_sitter/parser.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum TokenType {
  NEWLINE,
  INDENT,
  DEDENT,
  NL,
  LPAREN,
  RPAREN,
  LBRACKET,
  RBRACKET,
  LBRACE,
  RBRACE,
};

enum LineState {
  LINE_START = 0,   /* nothing scanned yet: at the start of the file */
  LINE_CODE = 1,    /* the current line holds code; its end is a NEWLINE */
  LINE_COMMENT = 2, /* the current line holds only a comment */
  LINE_ENDED = 3,   /* NEWLINE/INDENT emitted at this line end; DEDENTs, then NL */
};

#define MAX_DEPTH 128
#define MAX_INDENT 0xFFFF

typedef struct {
  uint16_t bracket_depth;
  uint8_t line;
  uint8_t pending_dedents;
  uint8_t have_next_indent; /* next_indent caches the next code line's indentation */
  uint16_t next_indent;
  uint16_t size; /* indents[0] is always 0 */
  uint16_t indents[MAX_DEPTH];
} Scanner;

static void reset(Scanner *s) {
  s->bracket_depth = 0;
  s->line = LINE_START;
  s->pending_dedents = 0;
  s->have_next_indent = 0;
  s->next_indent = 0;
  s->size = 1;
  s->indents[0] = 0;
}

static inline void advance(TSLexer *lexer) { lexer->advance(lexer, false); }
static inline void skip(TSLexer *lexer) { lexer->advance(lexer, true); }

static inline uint16_t top(const Scanner *s) { return s->indents[s->size - 1]; }

static inline uint16_t widen(uint16_t col, int32_t c) {
  uint32_t next = c == '\t' ? (col / 8u + 1u) * 8u : col + 1u;
  return next > MAX_INDENT ? MAX_INDENT : (uint16_t)next;
}

/* Number of open blocks deeper than `target`: the DEDENTs a line at `target` closes. */
static uint8_t blocks_above(const Scanner *s, uint16_t target) {
  uint8_t n = 0;
  for (uint16_t i = s->size; i > 1 && s->indents[i - 1] > target; i--) n++;
  return n;
}

enum LineKind { KIND_CODE, KIND_COMMENT, KIND_EOF };

/*
 * From the start of a line, skip blank lines and measure the first non-blank line:
 * its kind and its indentation. Stops on that line's first character.
 */
static enum LineKind measure_line(TSLexer *lexer, uint16_t *indent) {
  uint16_t col = 0;
  for (;;) {
    if (lexer->eof(lexer)) {
      *indent = 0;
      return KIND_EOF;
    }
    int32_t c = lexer->lookahead;
    if (c == ' ' || c == '\t') {
      col = widen(col, c);
      advance(lexer);
    } else if (c == '\f' || c == '\r') {
      advance(lexer);
    } else if (c == '\n') {
      col = 0;
      advance(lexer);
    } else {
      *indent = col;
      return c == '#' ? KIND_COMMENT : KIND_CODE;
    }
  }
}

/* Skip the rest of the current line, including its line break. */
static void skip_rest_of_line(TSLexer *lexer) {
  while (!lexer->eof(lexer) && lexer->lookahead != '\n') advance(lexer);
  if (!lexer->eof(lexer)) advance(lexer);
}

/* Called inside a comment line: the indentation of the next code line (0 at the end). */
static uint16_t next_code_indent(Scanner *s, TSLexer *lexer) {
  if (s->have_next_indent) return s->next_indent;
  uint16_t indent = 0;
  for (;;) {
    skip_rest_of_line(lexer);
    enum LineKind kind = measure_line(lexer, &indent);
    if (kind != KIND_COMMENT) break;
  }
  s->next_indent = indent;
  s->have_next_indent = 1;
  return indent;
}

/*
 * At the end of a line (the lexer on its '\n' or at EOF): how many blocks the lines
 * that follow close before the next non-blank line. Sets *code_indent to the next
 * code line's indentation.
 */
static uint8_t dedents_after_line(Scanner *s, TSLexer *lexer, uint16_t *code_indent) {
  uint16_t indent = 0;
  if (!lexer->eof(lexer)) advance(lexer); /* the '\n' */
  enum LineKind kind = measure_line(lexer, &indent);
  if (kind == KIND_EOF) {
    *code_indent = 0;
    return blocks_above(s, 0);
  }
  if (kind == KIND_CODE) {
    *code_indent = indent;
    return blocks_above(s, indent);
  }
  /* A comment line: it stays in the current block unless both it and the code
   * after it are less indented. */
  uint16_t code = next_code_indent(s, lexer);
  *code_indent = code;
  return blocks_above(s, indent > code ? indent : code);
}

static bool emit_newline_or_indent(Scanner *s, TSLexer *lexer, const bool *valid_symbols) {
  uint16_t code_indent = 0;
  uint8_t dedents = dedents_after_line(s, lexer, &code_indent);
  s->line = LINE_ENDED;
  if (valid_symbols[INDENT] && code_indent > top(s) && s->size < MAX_DEPTH) {
    s->indents[s->size++] = code_indent;
    s->pending_dedents = 0;
    lexer->result_symbol = INDENT;
  } else {
    s->pending_dedents = dedents;
    lexer->result_symbol = NEWLINE;
  }
  return true;
}

/*
 * The NL extra: from the '\n' (or the start of the file) over blank lines up to the
 * first character of the next non-blank line. If that line is a comment, work out the
 * DEDENTs due at its end now, while looking ahead past the token's end.
 */
static bool emit_nl(Scanner *s, TSLexer *lexer, bool at_start) {
  if (!at_start) advance(lexer); /* the '\n' */
  uint16_t indent = 0;
  enum LineKind kind = measure_line(lexer, &indent);
  lexer->mark_end(lexer);
  lexer->result_symbol = NL;
  s->pending_dedents = 0;
  if (kind == KIND_EOF) {
    s->line = LINE_ENDED;
  } else if (kind == KIND_CODE) {
    s->line = LINE_CODE;
    s->have_next_indent = 0;
  } else {
    s->line = LINE_COMMENT;
    skip_rest_of_line(lexer);
    uint16_t next = 0;
    enum LineKind next_kind = measure_line(lexer, &next);
    if (next_kind == KIND_EOF) {
      s->pending_dedents = blocks_above(s, 0);
    } else if (next_kind == KIND_CODE) {
      s->pending_dedents = blocks_above(s, next);
    } else {
      uint16_t code = next_code_indent(s, lexer);
      s->pending_dedents = blocks_above(s, next > code ? next : code);
    }
  }
  return true;
}

/*
 * At column 0 inside brackets: does this line start a new top-level definition
 * (`def `, `from `, `import `, or a decorator `@name`)? None of these can continue an
 * expression, so it is taken as the end of an unterminated bracket, and the next
 * definition still parses. Reads at most a few characters.
 */
static bool starts_top_level(TSLexer *lexer) {
  if (lexer->lookahead == '@') {
    advance(lexer);
    int32_t c = lexer->lookahead;
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  }
  char word[8];
  unsigned n = 0;
  while (n < sizeof(word) - 1 && lexer->lookahead >= 'a' && lexer->lookahead <= 'z') {
    word[n++] = (char)lexer->lookahead;
    advance(lexer);
  }
  word[n] = 0;
  if (lexer->lookahead != ' ' && lexer->lookahead != '\t') return false;
  return strcmp(word, "def") == 0 || strcmp(word, "from") == 0 || strcmp(word, "import") == 0;
}

static bool scan(Scanner *s, TSLexer *lexer, const bool *valid_symbols) {
  if (s->line == LINE_START) {
    if (lexer->eof(lexer)) return false;
    return emit_nl(s, lexer, true);
  }

  /* Horizontal whitespace, line continuations, and line breaks inside brackets. */
  bool marked = false;
  for (;;) {
    int32_t c = lexer->lookahead;
    if (c == ' ' || c == '\t' || c == '\f' || c == '\r') {
      skip(lexer);
    } else if (c == '\\') {
      skip(lexer);
      if (lexer->lookahead == '\r') skip(lexer);
      if (lexer->lookahead != '\n') return false;
      skip(lexer);
    } else if (c == '\n' && s->bracket_depth > 0) {
      if (!marked) lexer->mark_end(lexer);
      marked = true;
      skip(lexer);
      int32_t first = lexer->lookahead;
      if (first == '@' || first == 'd' || first == 'f' || first == 'i') {
        if (!starts_top_level(lexer)) return false;
        /* Give up on the open brackets: end the statement at that line break. */
        s->bracket_depth = 0;
        s->line = LINE_ENDED;
        s->pending_dedents = blocks_above(s, 0);
        lexer->result_symbol = NEWLINE;
        return true;
      }
    } else {
      break;
    }
  }

  int32_t c = lexer->lookahead;
  if (lexer->eof(lexer)) {
    lexer->mark_end(lexer);
    if (s->line == LINE_CODE) return emit_newline_or_indent(s, lexer, valid_symbols);
    if (s->pending_dedents > 0 || s->size > 1) {
      if (s->size > 1) s->size--;
      if (s->pending_dedents > 0) s->pending_dedents--;
      lexer->result_symbol = DEDENT;
      return true;
    }
    return false;
  }

  switch (c) {
    case '(':
    case '[':
    case '{':
      advance(lexer);
      lexer->mark_end(lexer);
      if (s->bracket_depth < UINT16_MAX) s->bracket_depth++;
      lexer->result_symbol = c == '(' ? LPAREN : c == '[' ? LBRACKET : LBRACE;
      return true;
    case ')':
    case ']':
    case '}':
      advance(lexer);
      lexer->mark_end(lexer);
      if (s->bracket_depth > 0) s->bracket_depth--;
      lexer->result_symbol = c == ')' ? RPAREN : c == ']' ? RBRACKET : RBRACE;
      return true;
    case '\n':
      break;
    default:
      return false;
  }

  /* A line break outside brackets. */
  lexer->mark_end(lexer);
  if (s->line == LINE_CODE) return emit_newline_or_indent(s, lexer, valid_symbols);
  if (s->pending_dedents > 0) {
    s->pending_dedents--;
    if (s->size > 1) s->size--;
    lexer->result_symbol = DEDENT;
    return true;
  }
  return emit_nl(s, lexer, false);
}

void *tree_sitter_tessera_external_scanner_create(void) {
  Scanner *s = (Scanner *)calloc(1, sizeof(Scanner));
  if (s) reset(s);
  return s;
}

void tree_sitter_tessera_external_scanner_destroy(void *payload) { free(payload); }

/*
 * Layout: depth (2 bytes), line, pending_dedents, have_next_indent, next_indent
 * (2 bytes), then the indentation levels after the first: one byte each when below
 * 255, else 255 followed by two bytes.
 */
unsigned tree_sitter_tessera_external_scanner_serialize(void *payload, char *buffer) {
  const Scanner *s = (const Scanner *)payload;
  unsigned n = 0;
  buffer[n++] = (char)(s->bracket_depth & 0xFF);
  buffer[n++] = (char)(s->bracket_depth >> 8);
  buffer[n++] = (char)s->line;
  buffer[n++] = (char)s->pending_dedents;
  buffer[n++] = (char)s->have_next_indent;
  buffer[n++] = (char)(s->next_indent & 0xFF);
  buffer[n++] = (char)(s->next_indent >> 8);
  for (uint16_t i = 1; i < s->size; i++) {
    if (n + 3 > TREE_SITTER_SERIALIZATION_BUFFER_SIZE) break;
    uint16_t v = s->indents[i];
    if (v < 255) {
      buffer[n++] = (char)v;
    } else {
      buffer[n++] = (char)255;
      buffer[n++] = (char)(v & 0xFF);
      buffer[n++] = (char)(v >> 8);
    }
  }
  return n;
}

void tree_sitter_tessera_external_scanner_deserialize(void *payload, const char *buffer,
                                                      unsigned length) {
  Scanner *s = (Scanner *)payload;
  reset(s);
  if (length < 7) return;
  const uint8_t *b = (const uint8_t *)buffer;
  s->bracket_depth = (uint16_t)(b[0] | (b[1] << 8));
  s->line = b[2] <= LINE_ENDED ? b[2] : LINE_CODE;
  s->pending_dedents = b[3];
  s->have_next_indent = b[4] ? 1 : 0;
  s->next_indent = (uint16_t)(b[5] | (b[6] << 8));
  unsigned i = 7;
  while (i < length && s->size < MAX_DEPTH) {
    uint16_t v = b[i++];
    if (v == 255) {
      if (i + 2 > length) break;
      v = (uint16_t)(b[i] | (b[i + 1] << 8));
      i += 2;
    }
    s->indents[s->size++] = v;
  }
  if (s->pending_dedents > s->size - 1) s->pending_dedents = (uint8_t)(s->size - 1);
}

bool tree_sitter_tessera_external_scanner_scan(void *payload, TSLexer *lexer,
                                               const bool *valid_symbols) {
  return scan((Scanner *)payload, lexer, valid_symbols);
}
