; Tessera textobjects, in Helix's captures (`maf`, `mif`, `]f`, `map`, `mac`, ...).
; Tessera has no classes; a kernel test is a function whose name starts with `test_`.
; A body is "the `block` child", not `body: (block)`: the tree-sitter runtime gives a comment
; before the block the block's field (tree-sitter issue #3329).

(decorated_definition
  (function_definition
    (block) @function.inside)) @function.around

(function_definition
  (block) @function.inside) @function.around

((function_definition
  name: (identifier) @_name
  (block) @test.inside) @test.around
  (#match? @_name "^test_"))

(parameters
  ((_) @parameter.inside
    .
    ","? @parameter.around) @parameter.around)

(argument_list
  ((_) @parameter.inside
    .
    ","? @parameter.around) @parameter.around)

(subscript
  subscript: (_) @parameter.inside @parameter.around)

(comment) @comment.inside

(comment)+ @comment.around

(list
  (_) @entry.around)

(tuple
  (_) @entry.around)

(pair
  (_) @entry.inside) @entry.around
