; Tessera highlights, in Helix's capture names (Helix 25.07+). The same patterns as
; ../highlights.scm (Neovim's names), in the same order, less the docstrings: keep the two
; files in step (test/highlight/*.tsr checks both).
;
; Helix 25.07+ lets the last of several patterns that capture the same node win, and an
; inner node win over an enclosing one; every capture is on a leaf, so the order alone
; decides, as in Neovim.
; ------------------------------------------------------------------ identifiers

(identifier) @variable

; The prefixes of built-in namespaces: `tile.load`, `ts.f32`, `dist.mesh`. Before the
; member pattern, so that a field that happens to be called `tile` stays a field.
((identifier) @namespace
  (#any-of? @namespace "tile" "ts" "dist"))

; `ctx.BM`, `k.T`
(attribute
  attribute: (identifier) @variable.other.member)

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
    (identifier) @namespace))

(import_statement
  name: (aliased_import
    name: (dotted_name
      (identifier) @namespace)))

(aliased_import
  alias: (identifier) @namespace)

(import_from_statement
  module_name: (dotted_name
    (identifier) @namespace))

; ------------------------------------------------------------------ functions

(function_definition
  name: (identifier) @function)

(call
  function: (identifier) @function)

(call
  function: (attribute
    attribute: (identifier) @function.method))

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

(comment) @comment

(string) @string

; (Helix has no documentation-string highlight: a docstring is a string.)

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

; ------------------------------------------------------------------ keywords

"def" @keyword.function

"return" @keyword.control.return

[
  "if"
  "elif"
  "else"
] @keyword.control.conditional

(conditional_expression
  [
    "if"
    "else"
  ] @keyword.control.conditional)

[
  "for"
  "while"
] @keyword.control.repeat

(for_statement
  "in" @keyword.control.repeat)

[
  (break_statement)
  (continue_statement)
] @keyword.control.repeat

[
  "import"
  "from"
] @keyword.control.import

(aliased_import
  "as" @keyword.control.import)

(with_item
  "as" @keyword.control)

[
  "with"
  (pass_statement)
] @keyword.control

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
  "*" @operator)

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
