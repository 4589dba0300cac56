; The outline panel and symbol search in Zed: functions (kernels, graph functions,
; helpers) with their decorators as annotations, and module constants.

(decorator) @annotation

(function_definition
  "def" @context
  name: (identifier) @name) @item

(module
  (assignment
    left: (identifier) @name) @item)
