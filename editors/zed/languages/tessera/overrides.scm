; Scopes named by `not_in` in config.toml: no auto-closed quotes inside strings and comments.
(comment) @comment.inclusive

(string) @string
