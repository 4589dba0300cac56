;;; tessera-mode.el --- Major mode for Tessera (.tsr) GPU kernel files  -*- lexical-binding: t; -*-

;; Copyright (C) 2025 The Tessera authors

;; Author: The Tessera authors
;; Maintainer: The Tessera authors
;; Version: 0.1.0
;; Package-Requires: ((emacs "27.1"))
;; Keywords: languages
;; URL: https://github.com/tessera-lang/tessera
;; SPDX-License-Identifier: Apache-2.0

;; This file is not part of GNU Emacs.

;;; Commentary:

;; Editing support for Tessera, a tile-first language for GPU kernels with
;; Python's syntax (`.tsr' files):
;;
;; - `tessera-mode': syntax highlighting (keywords, decorators, dtypes and
;;   numerics policies, built-in namespaces and functions, numbers, strings,
;;   comments), Python-style indentation, comments, imenu (kernels, graph
;;   functions and helpers) and defun navigation.
;; - `tessera-ts-mode' (Emacs 29 and later, built with tree-sitter): the same
;;   mode highlighted with the tree-sitter grammar of the Tessera repository.
;;   `M-x tessera-ts-install-grammar' compiles and installs it.
;; - The language server `tessera-lsp' is registered with Eglot and with
;;   lsp-mode as soon as either is loaded; `tessera-lsp-server-command'
;;   chooses the program.  Start it with `M-x eglot' (or `M-x lsp'), or in
;;   every Tessera buffer with
;;     (add-hook 'tessera-mode-hook #'eglot-ensure)
;;
;; See editors/emacs/README.md in the Tessera repository.

;;; Code:

(require 'rx)

(defgroup tessera nil
  "Major mode for Tessera (.tsr) GPU kernel files."
  :group 'languages
  :prefix "tessera-"
  :link '(url-link "https://github.com/tessera-lang/tessera"))

(defcustom tessera-indent-offset 4
  "Number of columns of one indentation level in Tessera code."
  :type 'integer
  :safe #'integerp)

(defcustom tessera-lsp-server-command '("tessera-lsp")
  "Command line of the Tessera language server, as a list of strings.
The first element is the program, the rest its arguments.  The
server speaks LSP over stdio; `(\"tessera\" \"lsp\")' starts the same
server through the command-line tool.  Used by the Eglot and
lsp-mode registrations of this package; changes apply to servers
started afterwards."
  :type '(repeat string))

(defface tessera-decorator-face
  '((t :inherit font-lock-preprocessor-face))
  "Face for decorators such as `@kernel' and `@jit'.")

(defface tessera-policy-face
  '((t :inherit font-lock-builtin-face))
  "Face for numerics policies in types, such as `@accum(f32)'.")

(defface tessera-number-face
  `((t :inherit ,(if (facep 'font-lock-number-face)
                     'font-lock-number-face
                   'font-lock-constant-face)))
  "Face for numeric literals.")

;;;; Vocabulary (docs/language.md)

(defconst tessera-keywords
  '("def" "return" "if" "elif" "else" "for" "in" "while" "break" "continue"
    "with" "as" "import" "from" "pass" "and" "or" "not" "is")
  "Keywords of the Tessera language.")

(defconst tessera-constants '("True" "False" "None" "INF" "NAN")
  "Built-in constants.")

(defconst tessera-dtypes
  '("f64" "f32" "tf32" "bf16" "f16" "fp8_e4m3" "fp8_e5m2" "int8" "int4" "i32"
    "i64" "bool" "fp64" "fp32" "fp16" "float64" "float32" "float16" "bfloat16"
    "int32" "int64" "e4m3" "e5m2" "i8")
  "Element types (dtypes) and their aliases.")

(defconst tessera-types
  '("Tensor" "KTile" "KVCache" "OptimizerState" "Tile" "Schedule" "ShardSpec")
  "Tensor and value types.")

(defconst tessera-policies
  '("accum" "stochastic_round" "loss_scale" "saturate" "fp32_master" "paged"
    "checkpointable" "rolling_window" "device")
  "Numerics and state policies, written `@NAME' after a dtype.")

(defconst tessera-namespaces '("tile" "dist" "verify" "ts")
  "Built-in namespaces, highlighted before a `.'.")

(defconst tessera-intrinsics
  '("context" "load" "store" "alloc_shared" "cp_async" "barrier" "zeros" "full"
    "arange" "dot" "mma" "transpose" "broadcast" "cast" "exp" "log" "sqrt"
    "rsqrt" "tanh" "sigmoid" "relu" "gelu" "silu" "maximum" "minimum" "where"
    "abs" "row_max" "row_sum" "sum" "max" "min" "causal_mask" "mask_causal"
    "softmax_online" "softmax_accumulate" "row_index" "col_index" "parallel"
    "range_n" "range" "program_id" "num_programs" "linear_id" "rand"
    ;; dist.
    "mesh" "tensor" "all_gather" "reduce_scatter" "all_reduce")
  "Members of `tile' and `dist', highlighted after the namespace.")

(defconst tessera-builtins
  '("float" "int" "min" "max" "cdiv" "len" "range" "dict" "grad" "exp" "log"
    "tanh" "sqrt" "rsqrt" "sigmoid" "relu" "gelu" "silu" "abs" "neg" "maximum"
    "minimum" "pow" "matmul" "gemm" "sum" "mean" "softmax_safe"
    "logsumexp_safe" "layernorm_safe" "rmsnorm_safe" "transpose" "reshape"
    "concat" "split" "split_qkv" "merge_heads" "flash_attention" "dropout"
    "residual" "cast" "cast_like" "zeros" "ones" "full" "randn" "arange"
    "block" "prefetch")
  "Built-in functions of graph code, highlighted before a `('.")

;;;; Syntax

(defvar tessera-mode-syntax-table
  (let ((table (make-syntax-table)))
    (modify-syntax-entry ?# "<" table)
    (modify-syntax-entry ?\n ">" table)
    (modify-syntax-entry ?\" "\"" table)
    (modify-syntax-entry ?\' "\"" table)
    (modify-syntax-entry ?\\ "\\" table)
    (modify-syntax-entry ?_ "_" table)
    (dolist (c '(?+ ?- ?* ?/ ?% ?& ?| ?^ ?~ ?< ?> ?= ?@ ?! ?. ?, ?: ?\; ?`))
      (modify-syntax-entry c "." table))
    table)
  "Syntax table of `tessera-mode'.")

(defun tessera--syntax-stringify ()
  "Mark the triple quote just matched when it opens or closes a string.
It gets string-fence syntax, so the string may span lines."
  (let* ((beg (match-beginning 0))
         (end (match-end 0))
         (ppss (save-excursion (syntax-ppss beg))))
    (cond
     ((nth 4 ppss) nil)                 ; in a comment
     ((not (nth 3 ppss))                ; outside strings: opens one
      (put-text-property beg (1+ beg) 'syntax-table (string-to-syntax "|")))
     ((and (eq (nth 3 ppss) t)          ; closes a fenced string of this quote
           (eq (char-after (nth 8 ppss)) (char-after beg)))
      (put-text-property (1- end) end 'syntax-table (string-to-syntax "|"))))))

(defconst tessera--syntax-propertize-function
  (syntax-propertize-rules
   ((rx (or "\"\"\"" "'''"))
    (0 (ignore (tessera--syntax-stringify)))))
  "Mark triple-quoted strings, which may span lines.")

(defun tessera--in-string-or-comment-p (&optional pos)
  "Non-nil when POS (default: point) is inside a string or a comment."
  (save-excursion (save-match-data (nth 8 (syntax-ppss pos)))))

;;;; Font lock

(defconst tessera--identifier-re "[[:alpha:]_][[:alnum:]_]*"
  "An identifier.")

(defconst tessera--decorator-re
  (concat "@[ \t]*" tessera--identifier-re
          "\\(?:[ \t]*\\.[ \t]*" tessera--identifier-re "\\)*")
  "A decorator's `@' and dotted name.")

(defun tessera--match-decorator (limit)
  "Font-lock matcher for decorators before LIMIT.
A decorator is an `@NAME' on a line that starts with `@', outside
brackets, strings and comments: `@jit @autodiff' are two."
  (let (found)
    (while (and (not found)
                (re-search-forward tessera--decorator-re limit t))
      (let ((beg (match-beginning 0))
            (data (match-data)))
        (save-excursion
          (save-match-data
            (let ((ppss (syntax-ppss beg)))
              (goto-char beg)
              (back-to-indentation)
              (when (and (not (nth 8 ppss))
                         (eq (char-after) ?@)
                         (= (car ppss) (car (syntax-ppss (point)))))
                (setq found t)))))
        (set-match-data data)))
    found))

(defconst tessera--assignment-re
  (concat "^[ \t]*\\(" tessera--identifier-re
          "\\)[ \t]*\\(?:\\(?:[-+*/@%]\\|//\\|\\*\\*\\)?=[^=]\\|:[^=\n]*=[^=]\\)")
  "The target of an assignment: `x = ...', `acc += ...', `x: T = ...'.")

(defun tessera--match-assignment (limit)
  "Font-lock matcher for assignment targets before LIMIT, outside brackets."
  (let (found)
    (while (and (not found)
                (re-search-forward tessera--assignment-re limit t))
      (let ((data (match-data)))
        (when (save-excursion
                (save-match-data
                  (let ((ppss (syntax-ppss (match-beginning 1))))
                    (and (= (car ppss) 0) (not (nth 8 ppss))))))
          (setq found t))
        (set-match-data data)))
    found))

(defun tessera--docstring-p (pos)
  "Non-nil when the string starting at POS is a function's docstring.
That is a string starting a line, right after a `def' header."
  (save-excursion
    (goto-char pos)
    (skip-chars-backward "rRuU")
    (and (save-excursion (skip-chars-backward " \t") (bolp))
         (tessera--previous-statement)
         (looking-at "def\\_>"))))

(defun tessera--syntactic-face (state)
  "The face of the string or comment of parse STATE."
  (cond ((not (nth 3 state)) font-lock-comment-face)
        ((save-match-data (tessera--docstring-p (nth 8 state))) font-lock-doc-face)
        (t font-lock-string-face)))

(defun tessera--symbols (words)
  "A regexp matching any of WORDS as a whole symbol."
  (concat "\\_<" (regexp-opt words t) "\\_>"))

(defconst tessera-font-lock-keywords
  `((tessera--match-decorator (0 'tessera-decorator-face))
    (,(concat "\\_<def[ \t]+\\(" tessera--identifier-re "\\)")
     (1 font-lock-function-name-face))
    (,(tessera--symbols tessera-keywords) (1 font-lock-keyword-face))
    (,(tessera--symbols tessera-constants) (1 font-lock-constant-face))
    (,(concat "@[ \t]*" (tessera--symbols tessera-policies))
     (0 'tessera-policy-face))
    (,(tessera--symbols tessera-types) (1 font-lock-type-face))
    (,(tessera--symbols tessera-dtypes) (1 font-lock-type-face))
    ;; `int' and `float' as types: after `:' or `->'.
    ("\\(?::\\|->\\)[ \t]*\\_<\\(int\\|float\\)\\_>" (1 font-lock-type-face))
    (,(concat (tessera--symbols tessera-namespaces) "[ \t]*\\.")
     (1 font-lock-builtin-face))
    (,(concat "\\_<\\(?:tile\\|dist\\)[ \t]*\\.[ \t]*"
              (tessera--symbols tessera-intrinsics))
     (1 font-lock-builtin-face))
    (,(concat (tessera--symbols tessera-builtins) "[ \t]*(")
     (1 font-lock-builtin-face))
    ;; Numbers: 0x2A 0o17 0b101 1_024 1.0 1. 1e-5 .5
    ("\\_<0[xX][[:xdigit:]_]+\\_>" (0 'tessera-number-face))
    ("\\_<0[oO][0-7_]+\\_>" (0 'tessera-number-face))
    ("\\_<0[bB][01_]+\\_>" (0 'tessera-number-face))
    ("\\_<[0-9][0-9_]*\\.\\(?:[0-9][0-9_]*\\)?\\(?:[eE][-+]?[0-9][0-9_]*\\)?"
     (0 'tessera-number-face))
    ("\\_<[0-9][0-9_]*\\(?:[eE][-+]?[0-9][0-9_]*\\)?\\_>"
     (0 'tessera-number-face))
    ("\\(?:^\\|[^[:alnum:]_.)]\\)\\(\\.[0-9][0-9_]*\\(?:[eE][-+]?[0-9][0-9_]*\\)?\\)"
     (1 'tessera-number-face))
    (tessera--match-assignment (1 font-lock-variable-name-face)))
  "Highlighting of `tessera-mode'.")

;;;; Indentation
;;
;; Python's rules.  A line inside brackets lines up with the first element
;; after the open bracket, or is indented one level from the line holding the
;; bracket when nothing follows it; a closing bracket lines up with its
;; opener.  Otherwise the previous statement decides: after a header ending in
;; `:' the line is indented one level; after `return', `pass', `break' or
;; `continue' it is dedented one level; otherwise it may stay at the level of
;; the previous statement or close any of the blocks around it.  `else' and
;; `elif' line up with an `if'/`elif' (and `else' also with a `for' or
;; `while') around them.
;;
;; Where several levels are possible, TAB picks the deepest and repeated TABs
;; cycle through the others; `indent-region' keeps the valid level nearest to
;; the line's current indentation, so it repairs a line without moving blocks.

(defconst tessera--dedenter-re
  (rx (or "return" "pass" "break" "continue") symbol-end)
  "Statements after which the next line is dedented.")

(defun tessera--blank-or-comment-line-p ()
  "Non-nil when the current line is empty, blank or only a comment."
  (save-excursion
    (beginning-of-line)
    (looking-at "[ \t]*\\(?:#.*\\)?$")))

(defun tessera--line-continues-p ()
  "Non-nil when the current line ends with a backslash continuation."
  (save-excursion
    (end-of-line)
    (and (eq (char-before) ?\\)
         (not (tessera--in-string-or-comment-p (1- (point)))))))

(defun tessera--goto-statement-start ()
  "Move point to the indentation of the statement holding the current line.
Continuation lines (inside brackets or strings, or after a backslash)
belong to the statement of the line they continue."
  (let ((done nil))
    (while (not done)
      (beginning-of-line)
      (let ((ppss (save-excursion (syntax-ppss (point)))))
        (cond
         ((nth 3 ppss) (goto-char (nth 8 ppss)))
         ((> (car ppss) 0) (goto-char (car (nth 9 ppss))))
         ((and (not (bobp))
               (save-excursion (forward-line -1) (tessera--line-continues-p)))
          (forward-line -1))
         (t (setq done t))))))
  (back-to-indentation))

(defun tessera--previous-statement ()
  "Move to the start of the statement before the current line.
Return nil, without moving, when there is none."
  (let ((start (point))
        (found nil))
    (beginning-of-line)
    (while (and (not found) (not (bobp)))
      (forward-line -1)
      (unless (tessera--blank-or-comment-line-p)
        (setq found t)))
    (if found
        (progn (tessera--goto-statement-start) t)
      (goto-char start)
      nil)))

(defun tessera--statement-end-char ()
  "The last character of code of the current line, outside comments, or nil."
  (save-excursion
    (end-of-line)
    (let ((ppss (syntax-ppss (point))))
      (when (nth 4 ppss) (goto-char (nth 8 ppss))))
    (skip-chars-backward " \t")
    (unless (or (bolp) (tessera--in-string-or-comment-p (1- (point))))
      (char-before))))

(defun tessera--block-header-p ()
  "Non-nil when the statement at point (its first line) opens a block.
Point is at the statement's start; the statement ends on the first line
without a continuation, and opens a block when that line ends with `:'."
  (save-excursion
    (let ((done nil))
      (while (not done)
        (end-of-line)
        (let ((ppss (syntax-ppss (point))))
          (if (and (or (nth 3 ppss) (> (car ppss) 0)
                       (tessera--line-continues-p))
                   (not (eobp)))
              (forward-line 1)
            (setq done t))))
      (eq (tessera--statement-end-char) ?:))))

(defun tessera--bracket-indentation (ppss)
  "Indentation of the current line, which is inside the brackets of PPSS."
  (let ((closing (save-excursion
                   (back-to-indentation)
                   (memq (char-after) '(?\) ?\] ?\})))))
    (save-excursion
      (goto-char (nth 1 ppss))
      (let ((open-column (current-column))
            (hanging (save-excursion
                       (forward-char 1)
                       (skip-chars-forward " \t")
                       (or (eolp) (eq (char-after) ?#)))))
        (cond
         (hanging (+ (current-indentation)
                     (if closing 0 tessera-indent-offset)))
         (closing open-column)
         (t (forward-char 1)
            (skip-chars-forward " \t")
            (current-column)))))))

(defun tessera--indentation-levels ()
  "The valid indentations of the current line, deepest first.
Return nil when the line must keep its indentation (inside a string)."
  (save-excursion
    (beginning-of-line)
    (let ((ppss (save-excursion (syntax-ppss (point)))))
      (cond
       ((nth 3 ppss) nil)
       ((> (car ppss) 0) (list (tessera--bracket-indentation ppss)))
       ((and (not (bobp))
             (save-excursion (forward-line -1) (tessera--line-continues-p)))
        (let ((continued (save-excursion
                           (forward-line -1)
                           (and (not (bobp))
                                (progn (forward-line -1)
                                       (tessera--line-continues-p))))))
          (list (if continued
                    (save-excursion (forward-line -1) (current-indentation))
                  (save-excursion
                    (forward-line -1)
                    (tessera--goto-statement-start)
                    (+ (current-indentation) tessera-indent-offset))))))
       (t (tessera--statement-levels))))))

(defun tessera--enclosing-headers ()
  "The statements around the statement at point, innermost first.
Each is (INDENTATION . KEYWORD), KEYWORD the symbol it starts with,
beginning with the statement at point itself."
  (let* ((headers (list (cons (current-indentation) (tessera--leading-word))))
         (limit (current-indentation)))
    (while (and (> limit 0) (tessera--previous-statement))
      (when (< (current-indentation) limit)
        (setq limit (current-indentation))
        (push (cons limit (tessera--leading-word)) headers)))
    (nreverse headers)))

(defun tessera--leading-word ()
  "The symbol at point, as a string, or nil."
  (when (looking-at "\\_<\\(?:\\sw\\|\\s_\\)+\\_>")
    (match-string-no-properties 0)))

(defun tessera--statement-levels ()
  "Valid indentations of the current line, outside brackets and strings."
  (let* ((line-word (save-excursion (back-to-indentation)
                                    (tessera--leading-word)))
         (else-like (member line-word '("else" "elif"))))
    (save-excursion
      (if (not (tessera--previous-statement))
          (list 0)
        (let* ((base (current-indentation))
               (header (tessera--block-header-p))
               (dedent (and (not header) (looking-at tessera--dedenter-re)))
               (enclosing (tessera--enclosing-headers))
               (levels (cond
                        (header (list (+ base tessera-indent-offset)))
                        (dedent (or (delq nil (mapcar (lambda (h) (and (< (car h) base) (car h)))
                                                      enclosing))
                                    (list 0)))
                        (t (mapcar #'car enclosing)))))
          (if (not else-like)
              levels
            ;; `else'/`elif': the level of a block that may take one.
            (let* ((openers (if (equal line-word "elif")
                                '("if" "elif")
                              '("if" "elif" "for" "while")))
                   (candidates
                    (delq nil
                          (mapcar (lambda (h)
                                    (and (member (cdr h) openers)
                                         (or header (<= (car h) base))
                                         (car h)))
                                  enclosing))))
              (or candidates levels))))))))

(defun tessera--nearest (column levels)
  "The element of LEVELS nearest to COLUMN; the deeper one on a tie."
  (let ((best nil))
    (dolist (level levels)
      (when (or (null best)
                (< (abs (- level column)) (abs (- best column)))
                (and (= (abs (- level column)) (abs (- best column)))
                     (> level best)))
        (setq best level)))
    best))

(defun tessera-indent-line (&optional keep-valid)
  "Indent the current line as Tessera code.
With KEEP-VALID non-nil (`indent-region'), move the line to the valid
indentation nearest to its current one.  Otherwise use the deepest
valid indentation, and on a repeated \\[indent-for-tab-command] the next
shallower one, cycling."
  (interactive)
  (let* ((levels (tessera--indentation-levels))
         (current (current-indentation))
         (target
          (cond
           ((null levels) nil)
           (keep-valid (tessera--nearest current levels))
           ((and (eq this-command 'indent-for-tab-command)
                 (eq last-command 'indent-for-tab-command)
                 (memq current levels))
            (or (cadr (memq current levels)) (car levels)))
           (t (car levels)))))
    (if (null target)
        'noindent
      (let ((offset (- (current-column) current)))
        (unless (= target current)
          (save-excursion (indent-line-to target)))
        (when (<= offset 0) (back-to-indentation))
        nil))))

(defun tessera-indent-region (start end)
  "Indent the lines between START and END, keeping valid indentations."
  (save-excursion
    (let ((end (copy-marker end)))
      (goto-char start)
      (beginning-of-line)
      (while (< (point) end)
        (unless (looking-at "[ \t]*$")
          (tessera-indent-line t))
        (forward-line 1))
      (set-marker end nil))))

(defun tessera--electric-dedent ()
  "Line `else:' and `elif ...:' up with their block as the `:' is typed."
  (when (and (eq last-command-event ?:)
             electric-indent-mode
             (not (tessera--in-string-or-comment-p))
             (save-excursion
               (back-to-indentation)
               (looking-at "\\(?:else\\|elif\\)\\_>")))
    (let ((levels (tessera--indentation-levels))
          (current (current-indentation)))
      (when (and levels (not (memq current levels)))
        (save-excursion
          (indent-line-to (or (car (tessera--at-most current levels))
                              (car levels))))))))

(defun tessera--at-most (column levels)
  "The elements of LEVELS not deeper than COLUMN."
  (delq nil (mapcar (lambda (level) (and (<= level column) level)) levels)))

;;;; Navigation and imenu

(defconst tessera--def-re
  (concat "^def[ \t]+\\(" tessera--identifier-re "\\)")
  "A top-level `def' (Tessera has no nested functions).")

(defun tessera--decorators-of-def ()
  "The decorator text above the `def' on the current line.
Leave point at the first decorator (or the `def')."
  (let ((text ""))
    (beginning-of-line)
    (while (save-excursion
             (and (tessera--previous-statement)
                  (eq (char-after) ?@)))
      (tessera--previous-statement)
      (setq text (concat (buffer-substring-no-properties
                          (point) (line-end-position))
                         "\n" text)))
    text))

(defun tessera--def-kind ()
  "The kind of the function defined on the current line.
`kernel', `graph' or `helper', from its decorators."
  (save-excursion
    (let ((decorators (tessera--decorators-of-def)))
      (cond
       ((string-match-p "@[ \t]*\\(?:[[:alnum:]_]+[ \t]*\\.[ \t]*\\)?kernel\\_>"
                        decorators)
        'kernel)
       ((string-match-p "@[ \t]*\\(?:[[:alnum:]_]+[ \t]*\\.[ \t]*\\)?\\(?:jit\\|autodiff\\)\\_>"
                        decorators)
        'graph)
       (t 'helper)))))

(defun tessera-imenu-create-index ()
  "The imenu index: kernels, graph functions and helper functions."
  (let (kernels graphs helpers)
    (save-excursion
      (goto-char (point-min))
      (while (re-search-forward tessera--def-re nil t)
        (let ((name (match-string-no-properties 1))
              (pos (match-beginning 0)))
          (unless (tessera--in-string-or-comment-p pos)
            (let ((entry (cons name pos)))
              (pcase (save-excursion (goto-char pos) (tessera--def-kind))
                ('kernel (push entry kernels))
                ('graph (push entry graphs))
                (_ (push entry helpers))))))))
    (delq nil
          (list (and kernels (cons "Kernels" (nreverse kernels)))
                (and graphs (cons "Graph functions" (nreverse graphs)))
                (and helpers (cons "Functions" (nreverse helpers)))))))

(defun tessera-beginning-of-defun (&optional arg)
  "Move to the start of the ARGth function before point (after, if negative).
The start of a function is its first decorator.  Return non-nil when found."
  (setq arg (or arg 1))
  (let ((found nil))
    (if (> arg 0)
        (dotimes (_ arg)
          (beginning-of-line)
          (setq found nil)
          (while (and (not found) (re-search-backward tessera--def-re nil t))
            (unless (tessera--in-string-or-comment-p)
              (setq found t)))
          (when found (tessera--decorators-of-def)))
      (dotimes (_ (- arg))
        (let ((from (point)))
          (setq found nil)
          (end-of-line)
          ;; The next function starting after point: not the one whose
          ;; decorators point is on.
          (while (and (not found) (re-search-forward tessera--def-re nil t))
            (unless (or (tessera--in-string-or-comment-p (match-beginning 0))
                        (<= (save-excursion (tessera--decorators-of-def) (point))
                            from))
              (setq found t)))
          (when found (tessera--decorators-of-def)))))
    found))

(defun tessera-current-defun ()
  "The name of the function around point, or nil (`add-log-current-defun')."
  (let ((pos (point)) (found nil))
    (save-excursion
      (end-of-line)
      (while (and (not found) (re-search-backward tessera--def-re nil t))
        (unless (tessera--in-string-or-comment-p)
          (setq found (match-string-no-properties 1))))
      (when found
        (tessera-end-of-defun)
        (and (< pos (point)) found)))))

(defun tessera-end-of-defun ()
  "Move past the end of the function beginning at point."
  (while (and (not (looking-at "def\\_>")) (not (eobp)))
    (forward-line 1))
  (forward-line 1)
  (let ((last (point)))
    (while (and (not (eobp))
                (or (tessera--blank-or-comment-line-p)
                    (> (current-indentation) 0)
                    (let ((ppss (save-excursion (syntax-ppss (point)))))
                      (or (nth 3 ppss) (> (car ppss) 0)))))
      (unless (tessera--blank-or-comment-line-p)
        (setq last (line-beginning-position 2)))
      (forward-line 1))
    (goto-char last)))

;;;; The mode

(defvar tessera-mode-map
  (let ((map (make-sparse-keymap)))
    map)
  "Keymap of `tessera-mode'.")

;;;###autoload
(define-derived-mode tessera-mode prog-mode "Tessera"
  "Major mode for Tessera (.tsr) GPU kernel files.

Indentation follows Python: TAB indents to the deepest valid level and
repeated TABs cycle through the others; `indent-region' only repairs
lines whose indentation is not valid.  `imenu' lists kernels, graph
functions and helpers.  The language server is registered with Eglot
and lsp-mode, see `tessera-lsp-server-command'.

\\{tessera-mode-map}"
  :group 'tessera
  (setq-local font-lock-defaults
              '(tessera-font-lock-keywords
                nil nil nil nil
                (font-lock-syntactic-face-function . tessera--syntactic-face)))
  (setq-local syntax-propertize-function tessera--syntax-propertize-function)
  (setq-local comment-start "# ")
  (setq-local comment-start-skip "#+[ \t]*")
  (setq-local comment-end "")
  (setq-local comment-use-syntax t)
  (setq-local indent-tabs-mode nil)
  (setq-local tab-width 8)
  (setq-local indent-line-function #'tessera-indent-line)
  (setq-local indent-region-function #'tessera-indent-region)
  (setq-local electric-indent-inhibit t)
  (add-hook 'post-self-insert-hook #'tessera--electric-dedent nil t)
  (setq-local paragraph-start "\\s-*$")
  (setq-local imenu-create-index-function #'tessera-imenu-create-index)
  (setq-local beginning-of-defun-function #'tessera-beginning-of-defun)
  (setq-local end-of-defun-function #'tessera-end-of-defun)
  (setq-local add-log-current-defun-function #'tessera-current-defun)
  (setq-local parse-sexp-ignore-comments t))

;;;###autoload
(add-to-list 'auto-mode-alist '("\\.tsr\\'" . tessera-mode))

;;;; Language server

(defun tessera--eglot-contact (&rest _)
  "The Eglot contact of the Tessera language server.
Eglot calls it with INTERACTIVE (and, in newer versions, the project)."
  tessera-lsp-server-command)

(defvar eglot-server-programs)

(with-eval-after-load 'eglot
  (add-to-list 'eglot-server-programs
               `(((tessera-mode :language-id "tessera")
                  (tessera-ts-mode :language-id "tessera"))
                 . tessera--eglot-contact)))

(defvar lsp-language-id-configuration)
(declare-function lsp-register-client "lsp-mode" (client))
(declare-function make-lsp-client "lsp-mode" (&rest args))
(declare-function lsp-stdio-connection "lsp-mode" (command &optional test-command))
(declare-function lsp-activate-on "lsp-mode" (&rest languages))

(with-eval-after-load 'lsp-mode
  (add-to-list 'lsp-language-id-configuration '(tessera-mode . "tessera"))
  (add-to-list 'lsp-language-id-configuration '(tessera-ts-mode . "tessera"))
  (add-to-list 'lsp-language-id-configuration '("\\.tsr\\'" . "tessera"))
  (lsp-register-client
   (make-lsp-client
    :new-connection (lsp-stdio-connection
                     (lambda () tessera-lsp-server-command)
                     (lambda () (and tessera-lsp-server-command
                                     (executable-find
                                      (car tessera-lsp-server-command)))))
    :activation-fn (lsp-activate-on "tessera")
    :major-modes '(tessera-mode tessera-ts-mode)
    :server-id 'tessera-lsp)))

;;;; Tree-sitter (Emacs 29 and later)

(defconst tessera--directory
  (file-name-directory (or load-file-name buffer-file-name default-directory))
  "The directory this file was loaded from.")

(defconst tessera-ts-grammar-url "https://github.com/tessera-lang/tessera"
  "The repository holding the Tessera tree-sitter grammar.")

(defconst tessera-ts-grammar-source-dir "grammars/tree-sitter-tessera/src"
  "The grammar's `src' directory (parser.c, scanner.c) in that repository.")

(defvar treesit-language-source-alist)

(with-eval-after-load 'treesit
  (add-to-list 'treesit-language-source-alist
               `(tessera ,tessera-ts-grammar-url nil
                         ,tessera-ts-grammar-source-dir)))

(defconst tessera-ts-font-lock-rules
  (let ((dtypes (concat "\\`" (regexp-opt tessera-dtypes) "\\'"))
        (types (concat "\\`" (regexp-opt tessera-types) "\\'"))
        (policies (concat "\\`" (regexp-opt tessera-policies) "\\'"))
        (namespaces (concat "\\`" (regexp-opt tessera-namespaces) "\\'"))
        (builtins (concat "\\`" (regexp-opt tessera-builtins) "\\'")))
    `(:language tessera :feature comment
      ((comment) @font-lock-comment-face)

      :language tessera :feature string
      ((string) @font-lock-string-face)

      :language tessera :feature docstring :override t
      ((function_definition
        body: (block :anchor (expression_statement (string) @font-lock-doc-face))))

      :language tessera :feature keyword
      (["def" "return" "if" "elif" "else" "for" "in" "while" "with" "as"
        "import" "from" "and" "or" "not" "is" "is not" "not in"]
       @font-lock-keyword-face
       [(pass_statement) (break_statement) (continue_statement)]
       @font-lock-keyword-face)

      :language tessera :feature definition
      ((function_definition name: (identifier) @font-lock-function-name-face)
       (typed_parameter name: (identifier) @font-lock-variable-name-face)
       (typed_default_parameter name: (identifier) @font-lock-variable-name-face)
       (default_parameter name: (identifier) @font-lock-variable-name-face)
       (parameters (identifier) @font-lock-variable-name-face))

      :language tessera :feature decorator
      ((decorator "@" @tessera-decorator-face)
       (decorator (identifier) @tessera-decorator-face)
       (decorator (attribute) @tessera-decorator-face)
       (decorator (call function: (_) @tessera-decorator-face)))

      :language tessera :feature type
      (((identifier) @font-lock-type-face
        (:match ,dtypes @font-lock-type-face))
       ((identifier) @font-lock-type-face
        (:match ,types @font-lock-type-face))
       (typed_parameter type: (identifier) @font-lock-type-face)
       (typed_default_parameter type: (identifier) @font-lock-type-face)
       (function_definition return_type: (identifier) @font-lock-type-face))

      :language tessera :feature policy :override t
      ((binary_operator
        operator: "@"
        right: (identifier) @tessera-policy-face
        (:match ,policies @tessera-policy-face))
       (binary_operator
        operator: "@"
        right: (call function: (identifier) @tessera-policy-face
                     (:match ,policies @tessera-policy-face))))

      :language tessera :feature constant
      ([(true) (false) (none) (ellipsis)] @font-lock-constant-face
       ((identifier) @font-lock-constant-face
        (:match "\\`\\(?:INF\\|NAN\\)\\'" @font-lock-constant-face)))

      :language tessera :feature number
      ([(integer) (float)] @tessera-number-face)

      :language tessera :feature builtin
      ((attribute object: (identifier) @font-lock-builtin-face
                  (:match ,namespaces @font-lock-builtin-face))
       (call function: (identifier) @font-lock-builtin-face
             (:match ,builtins @font-lock-builtin-face)))

      :language tessera :feature function
      ((call function: (identifier) @font-lock-function-call-face)
       (call function: (attribute attribute: (identifier)
                                  @font-lock-function-call-face)))

      :language tessera :feature property
      ((attribute attribute: (identifier) @font-lock-property-use-face)
       (keyword_argument name: (identifier) @font-lock-property-use-face))

      :language tessera :feature variable
      ((assignment left: (identifier) @font-lock-variable-name-face)
       (augmented_assignment left: (identifier) @font-lock-variable-name-face)
       (for_statement left: (identifier) @font-lock-variable-name-face))

      :language tessera :feature operator
      (["+" "-" "*" "**" "/" "//" "%" "|" "&" "^" "~" "<<" ">>" "<" "<=" ">"
        ">=" "==" "!=" "=" "+=" "-=" "*=" "/=" "@=" "//=" "%=" "**=" "&="
        "|=" "^=" "<<=" ">>=" "->"]
       @font-lock-operator-face
       (binary_operator operator: "@" @font-lock-operator-face))

      :language tessera :feature bracket
      (["(" ")" "[" "]" "{" "}"] @font-lock-bracket-face)

      :language tessera :feature delimiter
      (["," "." ":" ";"] @font-lock-delimiter-face)))
  "Arguments of `treesit-font-lock-rules' for `tessera-ts-mode'.")

(defconst tessera-ts-font-lock-feature-list
  '((comment definition)
    (keyword string docstring type policy decorator)
    (constant number builtin)
    (function property variable operator bracket delimiter))
  "Font-lock features of `tessera-ts-mode', by decoration level.")

(declare-function treesit-available-p "treesit.c")
(declare-function treesit-ready-p "treesit")
(declare-function treesit-parser-create "treesit.c")
(declare-function treesit-font-lock-rules "treesit")
(declare-function treesit-major-mode-setup "treesit")
(declare-function treesit-node-text "treesit.c")
(declare-function treesit-node-child-by-field-name "treesit.c")
(declare-function treesit-install-language-grammar "treesit")
(defvar treesit-font-lock-settings)
(defvar treesit-font-lock-feature-list)
(defvar treesit-simple-imenu-settings)
(defvar treesit-defun-type-regexp)
(defvar treesit-defun-name-function)

(defun tessera-ts--defun-name (node)
  "The name of the function definition NODE."
  (treesit-node-text (treesit-node-child-by-field-name node "name") t))

(defun tessera--checkout ()
  "The Tessera repository holding this file, or nil."
  (let ((root (locate-dominating-file tessera--directory
                                      "grammars/tree-sitter-tessera/src/parser.c")))
    (and root (expand-file-name root))))

(defun tessera-ts-install-grammar ()
  "Compile and install the Tessera tree-sitter grammar for `tessera-ts-mode'.
Builds it from the repository this file belongs to when there is one
\(a git checkout; its committed grammar is used), else from
`tessera-ts-grammar-url'.  Needs Emacs 29 built with tree-sitter,
git and a C compiler."
  (interactive)
  (unless (and (fboundp 'treesit-available-p) (treesit-available-p))
    (user-error "This Emacs has no tree-sitter support (Emacs 29+ built --with-tree-sitter)"))
  (let ((treesit-language-source-alist
         (cons (list 'tessera (or (tessera--checkout) tessera-ts-grammar-url)
                     nil tessera-ts-grammar-source-dir)
               treesit-language-source-alist)))
    (treesit-install-language-grammar 'tessera)))

;;;###autoload
(define-derived-mode tessera-ts-mode tessera-mode "Tessera[ts]"
  "Major mode for Tessera files, highlighted with tree-sitter (Emacs 29+).

Everything else (indentation, comments, navigation, the language
server) is `tessera-mode''s.  Without tree-sitter support or without
the grammar (\\[tessera-ts-install-grammar]) it behaves as `tessera-mode'."
  :group 'tessera
  (if (not (and (fboundp 'treesit-available-p) (treesit-available-p)
                (treesit-ready-p 'tessera t)))
      (message "tessera-ts-mode: no tree-sitter grammar for Tessera; %s"
               "using regexp highlighting (M-x tessera-ts-install-grammar)")
    (treesit-parser-create 'tessera)
    (setq-local font-lock-defaults nil)
    (setq-local treesit-font-lock-settings
                (apply #'treesit-font-lock-rules tessera-ts-font-lock-rules))
    (setq-local treesit-font-lock-feature-list tessera-ts-font-lock-feature-list)
    (setq-local treesit-defun-type-regexp "\\`function_definition\\'")
    (setq-local treesit-defun-name-function #'tessera-ts--defun-name)
    (setq-local treesit-simple-imenu-settings nil)
    (treesit-major-mode-setup)
    ;; `treesit-major-mode-setup' replaces these when it knows defuns; keep
    ;; the kernel/graph/helper index and the decorator-aware navigation.
    (setq-local imenu-create-index-function #'tessera-imenu-create-index)
    (setq-local beginning-of-defun-function #'tessera-beginning-of-defun)
    (setq-local end-of-defun-function #'tessera-end-of-defun)))

(provide 'tessera-mode)

;;; tessera-mode.el ends here
