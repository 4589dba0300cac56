; Indentation for Zed: the contents of brackets and the body of every compound
; statement are indented; a closing bracket ends its indentation.

(_ "(" ")" @end) @indent
(_ "[" "]" @end) @indent
(_ "{" "}" @end) @indent

(function_definition (block) @indent)
(if_statement (block) @indent)
(elif_clause (block) @indent)
(else_clause (block) @indent)
(for_statement (block) @indent)
(while_statement (block) @indent)
(with_statement (block) @indent)
