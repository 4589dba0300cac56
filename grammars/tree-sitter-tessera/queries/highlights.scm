; Tessera highlights, in nvim-treesitter's capture names (Neovim 0.10+; also what the
; `tree-sitter` CLI reads). Helix uses its own names: helix/highlights.scm has the same
; patterns in the same order, keep the two files in step.
;
; Where several patterns capture the same text, Neovim shows the one that comes last in
; this file (it also wins over a capture of an enclosing node). So general patterns come
; first and the special cases after them, and every capture is on a leaf (an identifier or
; a token), never on a node that contains other captured nodes.
; ------------------------------------------------------------------ identifiers

(identifier) @variable

; The prefixes of built-in namespaces: `tile.load`, `ts.f32`, `dist.mesh`. Before the
; member pattern, so that a field that happens to be called `tile` stays a field.
((identifier) @module.builtin
  (#any-of? @module.builtin "tile" "ts" "dist"))

; `ctx.BM`, `k.T`
(attribute
  attribute: (identifier) @variable.member)

; ------------------------------------------------------------------ parameters

(parameters
  (identifier) @variable.parameter)

(typed_parameter
  name: (identifier) @variable.parameter)

(default_parameter
  name: (identifier) @variable.parameter)

(typed_default_parameter
  name: (identifier) @variable.parameter)

(keyword_argument
  name: (identifier) @variable.parameter)

; ------------------------------------------------------------------ modules

(import_statement
  name: (dotted_name
    (identifier) @module))

(import_statement
  name: (aliased_import
    name: (dotted_name
      (identifier) @module)))

(aliased_import
  alias: (identifier) @module)

(import_from_statement
  module_name: (dotted_name
    (identifier) @module))

; ------------------------------------------------------------------ functions

(function_definition
  name: (identifier) @function)

(call
  function: (identifier) @function.call)

(call
  function: (attribute
    attribute: (identifier) @function.method.call))

((call
  function: (identifier) @function.builtin)
  (#any-of? @function.builtin
    "float" "int" "min" "max" "cdiv" "len" "range" "dict" "grad" "exp" "log" "tanh" "sqrt"
    "rsqrt" "sigmoid" "relu" "gelu" "silu" "abs" "neg" "maximum" "minimum" "pow" "matmul"
    "gemm" "sum" "mean" "softmax_safe" "logsumexp_safe" "layernorm_safe" "rmsnorm_safe"
    "transpose" "reshape" "concat" "split" "split_qkv" "merge_heads" "flash_attention"
    "dropout" "residual" "cast" "cast_like" "zeros" "ones" "full" "randn" "arange" "block"
    "prefetch"))

; ------------------------------------------------------------------ types and constants

; Element types (dtypes and their aliases), wherever they appear: `f32`, `ts.bf16`.
((identifier) @type.builtin
  (#any-of? @type.builtin
    "f64" "f32" "tf32" "bf16" "f16" "fp8_e4m3" "fp8_e5m2" "int8" "int4" "i32" "i64" "fp64"
    "fp32" "fp16" "float64" "float32" "float16" "bfloat16" "int32" "int64" "e4m3" "e5m2"))

; Scalar types where a type is expected.
(typed_parameter
  type: (identifier) @type.builtin
  (#any-of? @type.builtin "int" "float" "bool"))

(typed_default_parameter
  type: (identifier) @type.builtin
  (#any-of? @type.builtin "int" "float" "bool"))

(function_definition
  return_type: (identifier) @type.builtin
  (#any-of? @type.builtin "int" "float" "bool"))

(assignment
  type: (identifier) @type.builtin
  (#any-of? @type.builtin "int" "float" "bool"))

; Tensor and value types.
((identifier) @type
  (#any-of? @type "Tensor" "KTile" "KVCache" "OptimizerState" "Tile" "Schedule" "ShardSpec"))

((identifier) @constant.builtin
  (#any-of? @constant.builtin "INF" "NAN"))

; ------------------------------------------------------------------ decorators

; `@jit`, `@kernel.autotune(...)`, `@ts.kernel.autotune(...)`, `@verify.numerics(...)`:
; every part of the name is an attribute (not a call, a module or a field).
(decorator
  "@" @attribute)

(decorator
  (identifier) @attribute)

(decorator
  (call
    function: (identifier) @attribute))

(decorator
  [
    (attribute
      object: (identifier) @attribute
      attribute: (identifier) @attribute)
    (call
      function: (attribute
        object: (identifier) @attribute
        attribute: (identifier) @attribute))
  ])

(decorator
  [
    (attribute
      object: (attribute
        object: (identifier) @attribute
        attribute: (identifier) @attribute)
      attribute: (identifier) @attribute)
    (call
      function: (attribute
        object: (attribute
          object: (identifier) @attribute
          attribute: (identifier) @attribute)
        attribute: (identifier) @attribute))
  ])

(decorator
  [
    (attribute
      object: (attribute
        object: (attribute
          object: (identifier) @attribute
          attribute: (identifier) @attribute)
        attribute: (identifier) @attribute)
      attribute: (identifier) @attribute)
    (call
      function: (attribute
        object: (attribute
          object: (attribute
            object: (identifier) @attribute
            attribute: (identifier) @attribute)
          attribute: (identifier) @attribute)
        attribute: (identifier) @attribute))
  ])

; ------------------------------------------------------------------ literals

(comment) @spell @comment

(string) @string

; A docstring: the first statement of a function body or of the module.
(function_definition
  (block
    .
    (comment)*
    .
    (expression_statement
      (string) @spell @string.documentation)))

(module
  .
  (comment)*
  .
  (expression_statement
    (string) @spell @string.documentation))

(integer) @number

(float) @number.float

[
  (true)
  (false)
] @boolean

[
  (none)
  (ellipsis)
] @constant.builtin

; ------------------------------------------------------------------ keywords

"def" @keyword.function

"return" @keyword.return

[
  "if"
  "elif"
  "else"
] @keyword.conditional

(conditional_expression
  [
    "if"
    "else"
  ] @keyword.conditional.ternary)

[
  "for"
  "while"
] @keyword.repeat

(for_statement
  "in" @keyword.repeat)

[
  (break_statement)
  (continue_statement)
] @keyword.repeat

[
  "import"
  "from"
] @keyword.import

(aliased_import
  "as" @keyword.import)

(with_item
  "as" @keyword)

[
  "with"
  (pass_statement)
] @keyword

[
  "and"
  "or"
  "not"
  "is"
  "is not"
  "not in"
] @keyword.operator

(comparison_operator
  "in" @keyword.operator)

; ------------------------------------------------------------------ operators

[
  "+"
  "-"
  "*"
  "**"
  "/"
  "//"
  "%"
  "|"
  "&"
  "^"
  "~"
  "<<"
  ">>"
  "<"
  "<="
  ">"
  ">="
  "=="
  "!="
  "="
  "+="
  "-="
  "*="
  "/="
  "@="
  "//="
  "%="
  "**="
  "&="
  "|="
  "^="
  "<<="
  ">>="
  "->"
] @operator

(binary_operator
  operator: "@" @operator)


(wildcard_import
  "*" @character.special)

; ------------------------------------------------------------------ punctuation

[
  "("
  ")"
  "["
  "]"
  "{"
  "}"
] @punctuation.bracket

[
  ","
  "."
  ":"
  ";"
] @punctuation.delimiter

; ------------------------------------------------------------------ numeric policies

; `bf16 @accum(f32)`, `fp8_e4m3 @saturate`: the `@` and the policy are an attribute of the
; element type, not a matrix product and a call. After the operators, which they override.
(binary_operator
  operator: "@" @attribute
  right: [
    (identifier) @_policy
    (call
      function: (identifier) @_policy)
  ]
  (#any-of? @_policy
    "accum" "stochastic_round" "loss_scale" "saturate" "fp32_master" "paged" "checkpointable"
    "rolling_window" "device"))

(binary_operator
  operator: "@"
  right: [
    (identifier) @attribute
    (call
      function: (identifier) @attribute)
  ]
  (#any-of? @attribute
    "accum" "stochastic_round" "loss_scale" "saturate" "fp32_master" "paged" "checkpointable"
    "rolling_window" "device"))
