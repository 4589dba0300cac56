; Tessera highlights.
;
; Capture names are the ones Neovim (0.9+, nvim-treesitter) and Helix share, or
; dotted names that fall back to a shared parent (`@keyword.conditional` -> `@keyword`,
; `@constant.numeric.integer` -> `@constant`). Patterns are written so that a node is
; captured once: Neovim lets the last matching pattern win and Helix the first, so
; where two patterns can match the same node the general one comes first (Helix keeps
; the general capture, Neovim the specific one).

; ------------------------------------------------------------------ literals

(comment) @comment

(string) @string

; A docstring: the first statement of a function body (Neovim only, see above).
(function_definition
  body: (block
    .
    (expression_statement
      (string) @string.documentation)))

(integer) @constant.numeric.integer

(float) @constant.numeric.float

[
  (true)
  (false)
] @constant.builtin.boolean

[
  (none)
  (ellipsis)
] @constant.builtin

((identifier) @constant.builtin
  (#any-of? @constant.builtin "INF" "NAN"))

; ------------------------------------------------------------------ built-in names

; The prefixes of built-in namespaces: `tile.load`, `ts.f32`, `dist.mesh`.
((identifier) @variable.builtin
  (#any-of? @variable.builtin "tile" "ts" "dist"))

; Element types (dtypes and their aliases).
((identifier) @type.builtin
  (#any-of? @type.builtin
    "f64" "f32" "tf32" "bf16" "f16" "fp8_e4m3" "fp8_e5m2" "int8" "int4" "i32" "i64"
    "fp64" "fp32" "fp16" "float64" "float32" "float16" "bfloat16" "int32" "int64"
    "e4m3" "e5m2"))

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
  (#any-of? @type
    "Tensor" "KTile" "KVCache" "OptimizerState" "Tile" "Schedule" "ShardSpec"))

; Numeric policies: `bf16 @accum(f32)`, `fp8_e4m3 @saturate`.
(binary_operator
  operator: "@"
  right: (identifier) @attribute
  (#any-of? @attribute
    "accum" "stochastic_round" "loss_scale" "saturate" "fp32_master" "paged"
    "checkpointable" "rolling_window" "device"))

(binary_operator
  operator: "@"
  right: (call
    function: (identifier) @attribute
    (#any-of? @attribute
      "accum" "stochastic_round" "loss_scale" "saturate" "fp32_master" "paged"
      "checkpointable" "rolling_window" "device")))

; ------------------------------------------------------------------ functions

(function_definition
  name: (identifier) @function)

(decorator
  "@" @attribute)

(decorator
  (identifier) @attribute)

(decorator
  (attribute
    attribute: (identifier) @attribute))

((call
  function: (identifier) @function.builtin)
  (#any-of? @function.builtin
    "float" "int" "min" "max" "cdiv" "len" "range" "dict" "grad" "exp" "log" "tanh"
    "sqrt" "rsqrt" "sigmoid" "relu" "gelu" "silu" "abs" "neg" "maximum" "minimum" "pow"
    "matmul" "gemm" "sum" "mean" "softmax_safe" "logsumexp_safe" "layernorm_safe"
    "rmsnorm_safe" "transpose" "reshape" "concat" "split" "split_qkv" "merge_heads"
    "flash_attention" "dropout" "residual" "cast" "cast_like" "zeros" "ones" "full"
    "randn" "arange" "block" "prefetch"))

((call
  function: (identifier) @function.call)
  (#not-any-of? @function.call
    "float" "int" "min" "max" "cdiv" "len" "range" "dict" "grad" "exp" "log" "tanh"
    "sqrt" "rsqrt" "sigmoid" "relu" "gelu" "silu" "abs" "neg" "maximum" "minimum" "pow"
    "matmul" "gemm" "sum" "mean" "softmax_safe" "logsumexp_safe" "layernorm_safe"
    "rmsnorm_safe" "transpose" "reshape" "concat" "split" "split_qkv" "merge_heads"
    "flash_attention" "dropout" "residual" "cast" "cast_like" "zeros" "ones" "full"
    "randn" "arange" "block" "prefetch"
    "accum" "stochastic_round" "loss_scale" "saturate" "fp32_master" "paged"
    "checkpointable" "rolling_window" "device"
    "Tensor" "KTile" "KVCache" "OptimizerState" "Tile" "Schedule" "ShardSpec"
    "tile" "ts" "dist" "INF" "NAN"))

((call
  function: (attribute
    attribute: (identifier) @function.method.call))
  (#not-any-of? @function.method.call
    "Tensor" "KTile" "KVCache" "OptimizerState" "Tile" "Schedule" "ShardSpec"
    "f64" "f32" "tf32" "bf16" "f16" "fp8_e4m3" "fp8_e5m2" "int8" "int4" "i32" "i64"))

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

(keyword_separator) @operator

; ------------------------------------------------------------------ modules

(import_statement
  name: (dotted_name
    (identifier) @module))

(import_statement
  name: (aliased_import
    name: (dotted_name
      (identifier) @module)))

(import_from_statement
  module_name: (dotted_name
    (identifier) @module))

(wildcard_import) @operator

; ------------------------------------------------------------------ keywords

"def" @keyword.function

"return" @keyword.return

[
  "if"
  "elif"
  "else"
] @keyword.conditional

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

(import_statement
  (aliased_import
    "as" @keyword.import))

(import_from_statement
  (aliased_import
    "as" @keyword.import))

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
