; Tessera textobjects, in nvim-treesitter-textobjects' capture names (`af`/`if` etc. as
; mapped in its setup). Helix's version is helix/textobjects.scm.

; Bodies are matched as "the `block` child", not with the `body:`/`consequence:` fields:
; the tree-sitter runtime gives a comment between a header and its block the block's field
; (tree-sitter issue #3329), so `body: (block)` would miss a body that starts with a comment.
; ------------------------------------------------------------------ functions

(decorated_definition
  (function_definition)) @function.outer

(function_definition
  (block) @function.inner) @function.outer

; ------------------------------------------------------------------ control flow

(for_statement
  (block) @loop.inner) @loop.outer

(while_statement
  (block) @loop.inner) @loop.outer

(if_statement) @conditional.outer

(if_statement
  (block) @conditional.inner)

(if_statement
  [
    (elif_clause
      (block) @conditional.inner)
    (else_clause
      (block) @conditional.inner)
  ])

(if_statement
  condition: (_) @conditional.inner)

(_
  (block) @block.inner) @block.outer

(return_statement
  (_)? @return.inner) @return.outer

; ------------------------------------------------------------------ statements

(block
  (_) @statement.outer)

(module
  (_) @statement.outer)

(assignment
  left: (_) @assignment.lhs
  right: (_) @assignment.inner @assignment.rhs) @assignment.outer

(assignment
  left: (_) @assignment.inner)

(augmented_assignment
  left: (_) @assignment.lhs
  right: (_) @assignment.inner @assignment.rhs) @assignment.outer

(augmented_assignment
  left: (_) @assignment.inner)

; ------------------------------------------------------------------ calls and decorators

(call) @call.outer

(call
  arguments: (argument_list
    .
    "("
    _+ @call.inner
    ")"))

(decorator) @attribute.outer

(decorator
  "@"
  .
  (_) @attribute.inner)

; ------------------------------------------------------------------ parameters and items

; A parameter (argument, element, subscript) with the comma before it, or the first one
; with the comma after it.
(parameters
  "," @parameter.outer
  .
  [
    (identifier)
    (typed_parameter)
    (default_parameter)
    (typed_default_parameter)
    (keyword_separator)
  ] @parameter.inner @parameter.outer)

(parameters
  .
  [
    (identifier)
    (typed_parameter)
    (default_parameter)
    (typed_default_parameter)
    (keyword_separator)
  ] @parameter.inner @parameter.outer
  .
  ","? @parameter.outer)

(argument_list
  "," @parameter.outer
  .
  (_) @parameter.inner @parameter.outer)

(argument_list
  .
  (_) @parameter.inner @parameter.outer
  .
  ","? @parameter.outer)

(subscript
  "," @parameter.outer
  .
  (_) @parameter.inner @parameter.outer)

(subscript
  "["
  .
  (_) @parameter.inner @parameter.outer
  .
  ","? @parameter.outer)

(tuple
  "," @parameter.outer
  .
  (_) @parameter.inner @parameter.outer)

(tuple
  "("
  .
  (_) @parameter.inner @parameter.outer
  .
  ","? @parameter.outer)

(list
  "," @parameter.outer
  .
  (_) @parameter.inner @parameter.outer)

(list
  .
  (_) @parameter.inner @parameter.outer
  .
  ","? @parameter.outer)

(dictionary
  "," @parameter.outer
  .
  (pair) @parameter.inner @parameter.outer)

(dictionary
  .
  (pair) @parameter.inner @parameter.outer
  .
  ","? @parameter.outer)

; ------------------------------------------------------------------ comments and numbers

((comment) @comment.inner @comment.outer
  (#offset! @comment.inner 0 2 0 0)
  (#lua-match? @comment.outer "^# "))

((comment) @comment.inner @comment.outer
  (#offset! @comment.inner 0 1 0 0))

[
  (integer)
  (float)
] @number.inner
