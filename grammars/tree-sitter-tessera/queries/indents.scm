; Tessera indentation (nvim-treesitter style captures).

; A compound statement indents the lines after its header.
[
  (function_definition)
  (if_statement)
  (elif_clause)
  (else_clause)
  (for_statement)
  (while_statement)
  (with_statement)
] @indent.begin

; Brackets indent their contents and are closed by the matching bracket.
[
  (parameters)
  (argument_list)
  (parenthesized_expression)
  (tuple)
  (list)
  (dictionary)
  (subscript)
  (import_from_statement)
] @indent.begin

[
  ")"
  "]"
  "}"
] @indent.end

[
  ")"
  "]"
  "}"
  (elif_clause)
  (else_clause)
] @indent.branch

; After `return`, `pass`, `break` or `continue` the next line goes back one level.
[
  (return_statement)
  (pass_statement)
  (break_statement)
  (continue_statement)
] @indent.dedent

; Inside a multi-line string, keep whatever the user typed.
(string) @indent.auto

(comment) @indent.auto
