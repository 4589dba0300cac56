; Tessera indentation, in Helix's captures (see the Helix book, "Adding indent queries").
; Like Python's: a compound statement is extended (`@extend`) to the more indented lines
; after it, so that a new line inside its body is indented once.

[
  (function_definition)
  (if_statement)
  (for_statement)
  (while_statement)
  (with_statement)
  (import_from_statement)
  (parameters)
  (argument_list)
  (parenthesized_expression)
  (tuple)
  (list)
  (dictionary)
  (subscript)
  (binary_operator)
] @indent

[
  (function_definition)
  (if_statement)
  (for_statement)
  (while_statement)
  (with_statement)
] @extend

; A body ends after these: the next line goes back one level.
[
  (return_statement)
  (pass_statement)
  (break_statement)
  (continue_statement)
] @extend.prevent-once

[
  ")"
  "]"
  "}"
] @outdent

(elif_clause
  "elif" @outdent)

(else_clause
  "else" @outdent)

; `def f(a,` + Enter aligns with `a`; the same for call arguments.
(parameters
  .
  (_) @anchor
  (#set! "scope" "tail")) @align

(argument_list
  .
  (_) @anchor
  (#set! "scope" "tail")) @align

; A definition whose body is not written yet parses as an error: still indent after `:`.
(ERROR
  .
  "def") @indent @extend
