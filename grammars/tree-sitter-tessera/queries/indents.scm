; Tessera indentation, in nvim-treesitter's captures (`indentexpr` of nvim-treesitter).
; Helix's version is helix/indents.scm.

; A compound statement indents the lines after its header, also before its body exists
; (`indent.immediate`: typing `for i in x:` and Enter indents).
((function_definition) @indent.begin
  (#set! indent.immediate 1))

((if_statement) @indent.begin
  (#set! indent.immediate 1))

((for_statement) @indent.begin
  (#set! indent.immediate 1))

((while_statement) @indent.begin
  (#set! indent.immediate 1))

((with_statement) @indent.begin
  (#set! indent.immediate 1))

; `elif` and `else` go back to the level of their `if` (or `for`/`while`), and their body is
; indented again.
[
  (elif_clause)
  (else_clause)
] @indent.branch

; Brackets: a line after `f(a,` aligns with `a`; after a bare `f(` it is indented one level.
; The closing bracket goes back to the line of the opening one.
((parameters) @indent.align
  (#set! indent.open_delimiter "(")
  (#set! indent.close_delimiter ")"))

((argument_list) @indent.align
  (#set! indent.open_delimiter "(")
  (#set! indent.close_delimiter ")"))

((parenthesized_expression) @indent.align
  (#set! indent.open_delimiter "(")
  (#set! indent.close_delimiter ")"))

((tuple) @indent.align
  (#set! indent.open_delimiter "(")
  (#set! indent.close_delimiter ")"))

((list) @indent.align
  (#set! indent.open_delimiter "[")
  (#set! indent.close_delimiter "]"))

((subscript) @indent.align
  (#set! indent.open_delimiter "[")
  (#set! indent.close_delimiter "]"))

((dictionary) @indent.align
  (#set! indent.open_delimiter "{")
  (#set! indent.close_delimiter "}"))

(import_from_statement) @indent.begin

[
  ")"
  "]"
  "}"
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

; While typing: an unclosed bracket at the end of a line is an ERROR; the next line is
; indented one level (`x = f(` + Enter).
(ERROR
  [
    "("
    "["
    "{"
  ] @indent.begin
  .)

; `elif`/`else` typed on a body line parses as an identifier until the clause is complete;
; it goes back to the level of its `if`.
((expression_statement
  (identifier) @_keyword) @indent.branch
  (#any-of? @_keyword "elif" "else"))
