; Tessera highlights for Zed.
;
; Only the capture names Zed's themes document (editors/zed/test/zed-captures.txt). In Zed a
; later pattern overrides an earlier one for the same node, so general patterns come first.

; ------------------------------------------------------------------ names

(identifier) @variable

(attribute
  attribute: (identifier) @property)

(keyword_argument
  name: (identifier) @property)

(call
  function: (identifier) @function)

(call
  function: (attribute
    attribute: (identifier) @function))

(function_definition
  name: (identifier) @function)

; The built-in namespaces: `tile.load`, `ts.f32`, `dist.mesh`, `verify.numerics`.
((identifier) @variable.special
  (#any-of? @variable.special "tile" "ts" "dist" "verify"))

; ------------------------------------------------------------------ types

; Element types (dtypes) and their aliases.
((identifier) @type
  (#any-of? @type
    "f64" "f32" "tf32" "bf16" "f16" "fp8_e4m3" "fp8_e5m2" "int8" "int4" "i32" "i64" "i8"
    "bool" "fp64" "fp32" "fp16" "float64" "float32" "float16" "bfloat16" "int32" "int64"
    "e4m3" "e5m2"))

; Tensor and value types.
((identifier) @type
  (#any-of? @type
    "Tensor" "KTile" "KVCache" "OptimizerState" "Tile" "Schedule" "ShardSpec"))

; Any name in a type position: `n: int`, `-> float`, `x: T = v`.
(typed_parameter
  type: (identifier) @type)

(typed_default_parameter
  type: (identifier) @type)

(function_definition
  return_type: (identifier) @type)

(assignment
  type: (identifier) @type)

; ------------------------------------------------------------------ literals

(comment) @comment

(string) @string

; A docstring: the first statement of a function body.
(function_definition
  body: (block
    .
    (expression_statement
      (string) @comment.doc)))

[
  (integer)
  (float)
] @number

[
  (true)
  (false)
] @boolean

[
  (none)
  (ellipsis)
] @constant

((identifier) @constant
  (#any-of? @constant "INF" "NAN"))

; ------------------------------------------------------------------ decorators and policies

(decorator
  "@" @attribute)

(decorator
  (identifier) @attribute)

(decorator
  (attribute
    attribute: (identifier) @attribute))

(decorator
  (call
    function: (identifier) @attribute))

(decorator
  (call
    function: (attribute
      attribute: (identifier) @attribute)))

; Numerics policies after a dtype: `bf16 @accum(f32)`, `fp8_e4m3 @saturate`.
(binary_operator
  operator: "@" @attribute
  right: (identifier) @attribute @_policy
  (#any-of? @_policy
    "accum" "stochastic_round" "loss_scale" "saturate" "fp32_master" "paged"
    "checkpointable" "rolling_window" "device"))

(binary_operator
  operator: "@" @attribute
  right: (call
    function: (identifier) @attribute @_policy)
  (#any-of? @_policy
    "accum" "stochastic_round" "loss_scale" "saturate" "fp32_master" "paged"
    "checkpointable" "rolling_window" "device"))

; ------------------------------------------------------------------ keywords

[
  "def"
  "return"
  "if"
  "elif"
  "else"
  "for"
  "in"
  "while"
  "with"
  "as"
  "import"
  "from"
  "and"
  "or"
  "not"
  "is"
  "is not"
  "not in"
  (pass_statement)
  (break_statement)
  (continue_statement)
] @keyword

; ------------------------------------------------------------------ operators and punctuation

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
  (keyword_separator)
  (wildcard_import)
] @operator

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
