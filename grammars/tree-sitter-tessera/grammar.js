/**
 * @file Tree-sitter grammar for Tessera (`.tsr`), a Python-like tile-first GPU kernel language.
 * @license Apache-2.0
 *
 * The node kinds and field names are a contract with the Rust frontend: see NODES.md.
 * Layout (NEWLINE / INDENT / DEDENT) and the bracket tokens come from src/scanner.c, which
 * tracks bracket depth itself so that a newline outside brackets always ends a statement.
 */

/// <reference types="tree-sitter-cli/dsl" />
// @ts-check

const PREC = {
  conditional: 1,
  or: 2,
  and: 3,
  not: 4,
  compare: 5,
  bitor: 6,
  xor: 7,
  bitand: 8,
  shift: 9,
  plus: 10,
  times: 11,
  unary: 12,
  power: 13,
  decorator: 14,
  call: 15,
};

/**
 * One or more `rule`s separated by `sep`.
 * @param {RuleOrLiteral} rule
 * @param {RuleOrLiteral} sep
 */
function sep1(rule, sep) {
  return seq(rule, repeat(seq(sep, rule)));
}

/**
 * One or more `rule`s separated by commas, with an optional trailing comma.
 * @param {RuleOrLiteral} rule
 */
function commaSep1Trailing(rule) {
  return seq(sep1(rule, ','), optional(','));
}

module.exports = grammar({
  name: 'tessera',

  externals: $ => [
    $._newline,
    $._indent,
    $._dedent,
    $._nl,
    '(',
    ')',
    '[',
    ']',
    '{',
    '}',
  ],

  extras: $ => [
    $.comment,
    /[ \t\f\r\n]|\\\r?\n/,
    $._nl,
  ],

  word: $ => $.identifier,

  rules: {
    module: $ => repeat($._statement),

    _statement: $ => choice(
      $._simple_statements,
      $._compound_statement,
    ),

    // ---------------------------------------------------------------- simple statements

    _simple_statements: $ => seq(
      sep1($._simple_statement, ';'),
      optional(';'),
      $._newline,
    ),

    _simple_statement: $ => choice(
      $.import_statement,
      $.import_from_statement,
      $.expression_statement,
      $.assignment,
      $.augmented_assignment,
      $.return_statement,
      $.pass_statement,
      $.break_statement,
      $.continue_statement,
    ),

    import_statement: $ => seq(
      'import',
      sep1(field('name', $._import_name), ','),
    ),

    import_from_statement: $ => seq(
      'from',
      field('module_name', $.dotted_name),
      'import',
      choice(
        $.wildcard_import,
        sep1(field('name', $._import_name), ','),
        seq('(', commaSep1Trailing(field('name', $._import_name)), ')'),
      ),
    ),

    _import_name: $ => choice($.dotted_name, $.aliased_import),

    aliased_import: $ => seq(
      field('name', $.dotted_name),
      'as',
      field('alias', $.identifier),
    ),

    wildcard_import: _ => '*',

    dotted_name: $ => sep1($.identifier, '.'),

    expression_statement: $ => choice($._expression, $.expression_list),

    assignment: $ => seq(
      field('left', choice($._expression, $.pattern_list)),
      choice(
        seq('=', field('right', $._right_hand_side)),
        seq(
          ':',
          field('type', $._expression),
          optional(seq('=', field('right', $._right_hand_side))),
        ),
      ),
    ),

    augmented_assignment: $ => seq(
      field('left', $._expression),
      field('operator', choice(
        '+=', '-=', '*=', '/=', '@=', '//=', '%=', '**=',
        '&=', '|=', '^=', '<<=', '>>=',
      )),
      field('right', $._right_hand_side),
    ),

    _right_hand_side: $ => choice($._expression, $.expression_list),

    // `a, b` (at least one comma, no parentheses): shared by expression_list,
    // pattern_list and tuple so that the choice between them is made only at the
    // token after the list (`=` or the end of the statement).
    _expressions: $ => seq(
      $._expression,
      ',',
      repeat(seq($._expression, ',')),
      optional($._expression),
    ),

    expression_list: $ => $._expressions,

    pattern_list: $ => $._expressions,

    return_statement: $ => seq('return', optional($._right_hand_side)),

    pass_statement: _ => 'pass',
    break_statement: _ => 'break',
    continue_statement: _ => 'continue',

    // ---------------------------------------------------------------- compound statements

    _compound_statement: $ => choice(
      $.function_definition,
      $.decorated_definition,
      $.if_statement,
      $.for_statement,
      $.while_statement,
      $.with_statement,
    ),

    _suite: $ => choice(
      alias($._simple_statements, $.block),
      seq($._indent, $.block),
    ),

    block: $ => seq(repeat($._statement), $._dedent),

    decorated_definition: $ => seq(
      repeat1(field('decorator', $.decorator)),
      field('definition', $.function_definition),
    ),

    // `@jit @autodiff` on one line is two decorators: a decorator is a name, an
    // attribute or a call, never a binary `@`.
    decorator: $ => prec(PREC.decorator, seq(
      '@',
      choice($.identifier, $.attribute, $.call),
      optional($._newline),
    )),

    function_definition: $ => seq(
      'def',
      field('name', $.identifier),
      field('parameters', $.parameters),
      optional(seq('->', field('return_type', $._expression))),
      ':',
      field('body', $._suite),
    ),

    parameters: $ => seq('(', optional(commaSep1Trailing($._parameter)), ')'),

    _parameter: $ => choice(
      $.identifier,
      $.typed_parameter,
      $.default_parameter,
      $.typed_default_parameter,
      $.keyword_separator,
    ),

    typed_parameter: $ => seq(
      field('name', $.identifier),
      ':',
      field('type', $._expression),
    ),

    default_parameter: $ => seq(
      field('name', $.identifier),
      '=',
      field('value', $._expression),
    ),

    typed_default_parameter: $ => seq(
      field('name', $.identifier),
      ':',
      field('type', $._expression),
      '=',
      field('value', $._expression),
    ),

    keyword_separator: _ => '*',

    if_statement: $ => seq(
      'if',
      field('condition', $._expression),
      ':',
      field('consequence', $._suite),
      repeat(field('alternative', $.elif_clause)),
      optional(field('alternative', $.else_clause)),
    ),

    elif_clause: $ => seq(
      'elif',
      field('condition', $._expression),
      ':',
      field('consequence', $._suite),
    ),

    else_clause: $ => seq(
      'else',
      ':',
      field('body', $._suite),
    ),

    for_statement: $ => seq(
      'for',
      field('left', $._for_target),
      'in',
      field('right', $._expression),
      ':',
      field('body', $._suite),
      optional(field('alternative', $.else_clause)),
    ),

    // Loop targets are primaries, so the `in` after them is never a comparison.
    _for_target: $ => choice(
      $._primary_expression,
      alias($._primary_list, $.pattern_list),
    ),

    _primary_list: $ => seq(
      $._primary_expression,
      ',',
      repeat(seq($._primary_expression, ',')),
      optional($._primary_expression),
    ),

    while_statement: $ => seq(
      'while',
      field('condition', $._expression),
      ':',
      field('body', $._suite),
      optional(field('alternative', $.else_clause)),
    ),

    with_statement: $ => seq(
      'with',
      sep1($.with_item, ','),
      ':',
      field('body', $._suite),
    ),

    with_item: $ => seq(
      field('value', $._expression),
      optional(seq('as', field('alias', $._expression))),
    ),

    // ---------------------------------------------------------------- expressions

    _expression: $ => choice(
      $._primary_expression,
      $.not_operator,
      $.boolean_operator,
      $.comparison_operator,
      $.conditional_expression,
    ),

    _primary_expression: $ => choice(
      $.identifier,
      $.integer,
      $.float,
      $.string,
      $.true,
      $.false,
      $.none,
      $.ellipsis,
      $.attribute,
      $.subscript,
      $.call,
      $.parenthesized_expression,
      $.tuple,
      $.list,
      $.dictionary,
      $.binary_operator,
      $.unary_operator,
    ),

    not_operator: $ => prec(PREC.not, seq(
      'not',
      field('argument', $._expression),
    )),

    boolean_operator: $ => choice(
      prec.left(PREC.and, seq(
        field('left', $._expression),
        field('operator', 'and'),
        field('right', $._expression),
      )),
      prec.left(PREC.or, seq(
        field('left', $._expression),
        field('operator', 'or'),
        field('right', $._expression),
      )),
    ),

    comparison_operator: $ => prec.left(PREC.compare, seq(
      field('left', $._expression),
      field('operator', choice(
        '<', '<=', '>', '>=', '==', '!=', 'in',
        alias(seq('not', 'in'), 'not in'),
        'is',
        alias(prec(PREC.compare, seq('is', 'not')), 'is not'),
      )),
      field('right', $._expression),
    )),

    conditional_expression: $ => prec.right(PREC.conditional, seq(
      field('consequence', $._expression),
      'if',
      field('condition', $._expression),
      'else',
      field('alternative', $._expression),
    )),

    binary_operator: $ => {
      /** @type {[RuleOrLiteral, number][]} */
      const table = [
        ['+', PREC.plus],
        ['-', PREC.plus],
        ['*', PREC.times],
        ['@', PREC.times],
        ['/', PREC.times],
        ['//', PREC.times],
        ['%', PREC.times],
        ['|', PREC.bitor],
        ['^', PREC.xor],
        ['&', PREC.bitand],
        ['<<', PREC.shift],
        ['>>', PREC.shift],
      ];
      return choice(
        ...table.map(([operator, precedence]) => prec.left(precedence, seq(
          field('left', $._primary_expression),
          field('operator', operator),
          field('right', $._primary_expression),
        ))),
        prec.right(PREC.power, seq(
          field('left', $._primary_expression),
          field('operator', '**'),
          field('right', $._primary_expression),
        )),
      );
    },

    unary_operator: $ => prec(PREC.unary, seq(
      field('operator', choice('-', '+', '~')),
      field('argument', $._primary_expression),
    )),

    attribute: $ => prec(PREC.call, seq(
      field('object', $._primary_expression),
      '.',
      field('attribute', $.identifier),
    )),

    subscript: $ => prec(PREC.call, seq(
      field('value', $._primary_expression),
      '[',
      commaSep1Trailing(field('subscript', choice($._expression, $.slice))),
      ']',
    )),

    slice: $ => seq(
      optional(field('start', $._expression)),
      ':',
      optional(field('stop', $._expression)),
      optional(seq(':', optional(field('step', $._expression)))),
    ),

    call: $ => prec(PREC.call, seq(
      field('function', $._primary_expression),
      field('arguments', $.argument_list),
    )),

    argument_list: $ => seq(
      '(',
      optional(commaSep1Trailing(choice($._expression, $.keyword_argument))),
      ')',
    ),

    keyword_argument: $ => seq(
      field('name', $.identifier),
      '=',
      field('value', $._expression),
    ),

    parenthesized_expression: $ => seq('(', $._expression, ')'),

    tuple: $ => seq('(', optional($._expressions), ')'),

    list: $ => seq('[', optional(commaSep1Trailing($._expression)), ']'),

    dictionary: $ => seq('{', optional(commaSep1Trailing($.pair)), '}'),

    pair: $ => seq(
      field('key', $._expression),
      ':',
      field('value', $._expression),
    ),

    // ---------------------------------------------------------------- leaves

    identifier: _ => /[_\p{XID_Start}][_\p{XID_Continue}]*/,

    integer: _ => token(choice(
      /0[xX][0-9a-fA-F_]+/,
      /0[oO][0-7_]+/,
      /0[bB][01_]+/,
      /[0-9][0-9_]*/,
    )),

    float: _ => {
      const digits = /[0-9][0-9_]*/;
      const exponent = /[eE][+-]?[0-9][0-9_]*/;
      return token(choice(
        seq(digits, '.', optional(digits), optional(exponent)),
        seq('.', digits, optional(exponent)),
        seq(digits, exponent),
      ));
    },

    string: _ => {
      const prefix = /[rRbBuUfF]{0,2}/;
      return token(seq(prefix, choice(
        /"""([^"\\]|\\[\s\S]|"[^"\\]|"\\[\s\S]|""[^"\\]|""\\[\s\S])*"""/,
        /'''([^'\\]|\\[\s\S]|'[^'\\]|'\\[\s\S]|''[^'\\]|''\\[\s\S])*'''/,
        /"([^"\\\r\n]|\\(\r\n|[\s\S]))*"/,
        /'([^'\\\r\n]|\\(\r\n|[\s\S]))*'/,
      )));
    },

    true: _ => 'True',
    false: _ => 'False',
    none: _ => 'None',
    ellipsis: _ => '...',

    comment: _ => token(seq('#', /[^\r\n]*/)),
  },
});
