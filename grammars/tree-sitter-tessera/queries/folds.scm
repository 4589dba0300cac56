; Tessera folds (`@fold`, the only fold capture; Neovim and nvim-treesitter).

[
  (function_definition)
  (if_statement)
  (elif_clause)
  (else_clause)
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
  (string)
] @fold

; A run of import statements.
[
  (import_statement)
  (import_from_statement)
]+ @fold
