; Text objects for Zed's Vim mode: `af`/`if` on functions, `gc` on comments.
(function_definition
  body: (_) @function.inside) @function.around

(decorated_definition) @function.around

(comment)+ @comment.around
