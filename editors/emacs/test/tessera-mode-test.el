;;; tessera-mode-test.el --- ERT tests of tessera-mode  -*- lexical-binding: t; -*-

;;; Commentary:

;; emacs --batch -Q -L editors/emacs -L editors/emacs/test \
;;   -l tessera-mode-test -f ert-run-tests-batch-and-exit
;; (run.sh does this.)  Byte-compilation, checkdoc, the package headers, font
;; lock, syntax, indentation, comments, imenu, defun navigation, and the
;; tree-sitter queries of `tessera-ts-mode' against the repository's grammar.

;;; Code:

(require 'tessera-test-helpers)
(require 'tessera-mode)
(require 'imenu)
(require 'lisp-mnt)
(require 'package)

(defconst tessera-test-mode-file
  (expand-file-name "../tessera-mode.el" tessera-test-dir))

(defmacro tessera-test-with-buffer (text &rest body)
  "Run BODY in a `tessera-mode' buffer holding TEXT, fontified, point at the start."
  (declare (indent 1))
  `(with-temp-buffer
     (insert ,text)
     (tessera-mode)
     (font-lock-ensure)
     (goto-char (point-min))
     ,@body))

(defun tessera-test-file-text (file)
  "The text of FILE (relative to the repository root)."
  (with-temp-buffer
    (insert-file-contents (expand-file-name file tessera-test-repo))
    (buffer-string)))

;;;; Packaging

(ert-deftest tessera-byte-compiles-without-warnings ()
  "A fresh `emacs -Q' byte-compiles the file with warnings as errors."
  (let* ((dir (make-temp-file "tessera-elc-" t))
         (copy (expand-file-name "tessera-mode.el" dir))
         (emacs (expand-file-name invocation-name invocation-directory)))
    (copy-file tessera-test-mode-file copy)
    (with-temp-buffer
      (let ((status (call-process emacs nil t nil "-Q" "--batch"
                                  "--eval" "(setq byte-compile-error-on-warn t)"
                                  "-f" "batch-byte-compile" copy)))
        (should (equal (list status (buffer-string)) (list 0 "")))))
    (should (file-exists-p (concat copy "c")))
    (delete-directory dir t)))

(ert-deftest tessera-checkdoc-is-clean ()
  (require 'checkdoc)
  (let ((problems nil))
    (with-temp-buffer
      (insert-file-contents tessera-test-mode-file)
      (emacs-lisp-mode)
      (setq buffer-file-name tessera-test-mode-file)
      (cl-letf (((symbol-function 'checkdoc-create-error)
                 (lambda (text start _end &optional _unfixable)
                   (push (format "%d: %s" (line-number-at-pos start) text) problems)
                   nil)))
        (let ((checkdoc-autofix-flag 'never)
              (checkdoc-spellcheck-documentation-flag nil))
          (checkdoc-current-buffer t)))
      (set-buffer-modified-p nil)
      (setq buffer-file-name nil))
    (should (equal problems nil))))

(ert-deftest tessera-package-headers ()
  "The headers package.el and package-lint read."
  (with-temp-buffer
    (insert-file-contents tessera-test-mode-file)
    (let ((info (package-buffer-info)))
      (should (equal (package-desc-name info) 'tessera-mode))
      (should (equal (package-desc-version info) '(0 1 0)))
      (should (equal (package-desc-reqs info) '((emacs (27 1)))))
      (should (string-match-p "\\`Major mode for Tessera" (package-desc-summary info))))
    (should (equal (lm-header "URL") "https://github.com/tessera-lang/tessera"))
    (should (member "languages" (split-string (lm-header "Keywords") "[ ,]+" t)))
    (should (lm-header "SPDX-License-Identifier"))
    (goto-char (point-min))
    (should (looking-at ";;; tessera-mode.el --- .*-\\*- lexical-binding: t; -\\*-$"))
    (should (re-search-forward "^;;; tessera-mode.el ends here$" nil t))))

(ert-deftest tessera-auto-mode ()
  (let ((file (make-temp-file "tessera-" nil ".tsr" "x = 1\n")))
    (unwind-protect
        (with-current-buffer (find-file-noselect file)
          (unwind-protect (should (eq major-mode 'tessera-mode))
            (kill-buffer)))
      (delete-file file))))

(ert-deftest tessera-server-command-is-customizable ()
  (should (custom-variable-p 'tessera-lsp-server-command))
  (should (equal (default-value 'tessera-lsp-server-command) '("tessera-lsp")))
  (let ((tessera-lsp-server-command '("tessera" "lsp")))
    (should (equal (tessera--eglot-contact) '("tessera" "lsp")))))

;;;; Syntax and font lock

(defconst tessera-test-sample
  "# A comment
import tessera as ts
from tessera import tile, Tensor, bf16, f32

BLOCK = 0x80

@ts.kernel.autotune(space=dict(BM=[64, 128]))
def gemm(A: Tensor[\"M\", \"K\", bf16 @accum(f32)], n: int, alpha: float = 1.5e-3):
    \"\"\"Docstring spanning
    lines, with 'quotes' and # no comment.\"\"\"
    ctx = tile.context()
    x = exp(A) * .5 + 1_024
    if n is not None and True:
        return tile.dot(x, x.T)
    y = INF
    s = '''single # quotes \"\"\" inside'''
    return y


@jit @autodiff
def loss(x: Tensor[\"N\", f32]) -> Tensor[f32]:
    return sum(x)


def helper(v: f32) -> f32:
    return v * 2.0
"
  "Text the font-lock, imenu and navigation tests use.")

(defun tessera-test-face (needle &optional nth offset)
  "The face at the NTH (default 1) occurrence of NEEDLE, OFFSET chars in."
  (save-excursion
    (goto-char (point-min))
    (search-forward needle nil nil (or nth 1))
    (get-text-property (+ (match-beginning 0) (or offset 0)) 'face)))

(defun tessera-test-face-p (face needle &optional nth offset)
  "Non-nil when FACE is (one of) the faces at NEEDLE (see `tessera-test-face')."
  (let ((faces (tessera-test-face needle nth offset)))
    (if (listp faces) (memq face faces) (eq face faces))))

(ert-deftest tessera-font-lock ()
  (tessera-test-with-buffer tessera-test-sample
    (should (tessera-test-face-p 'font-lock-comment-face "A comment"))
    (dolist (kw '("import" "from" "def" "return"))
      (should (tessera-test-face-p 'font-lock-keyword-face kw)))
    (should (tessera-test-face-p 'font-lock-keyword-face "    if n" 1 4))
    (should (tessera-test-face-p 'font-lock-keyword-face "as ts"))
    (should (tessera-test-face-p 'font-lock-keyword-face "is not"))
    (should (tessera-test-face-p 'font-lock-keyword-face "not None"))
    (should (tessera-test-face-p 'font-lock-keyword-face "and True"))
    (dolist (c '("None" "True" "INF"))
      (should (tessera-test-face-p 'font-lock-constant-face c)))
    ;; Decorators, one or several to a line; not their arguments.
    (should (tessera-test-face-p 'tessera-decorator-face "@ts.kernel"))
    (should (tessera-test-face-p 'tessera-decorator-face "autotune"))
    (should (tessera-test-face-p 'tessera-decorator-face "@jit"))
    (should (tessera-test-face-p 'tessera-decorator-face "@autodiff"))
    (should-not (tessera-test-face-p 'tessera-decorator-face "space"))
    (should (tessera-test-face-p 'font-lock-function-name-face "gemm"))
    (should (tessera-test-face-p 'font-lock-function-name-face "helper"))
    (should (tessera-test-face-p 'font-lock-function-name-face "loss"))
    ;; Types, dtypes and policies.
    (should (tessera-test-face-p 'font-lock-type-face "Tensor" 2))
    (should (tessera-test-face-p 'font-lock-type-face "bf16" 2))
    (should (tessera-test-face-p 'tessera-policy-face "@accum"))
    (should (tessera-test-face-p 'font-lock-type-face "f32)"))
    (should (tessera-test-face-p 'font-lock-type-face "int,"))
    (should (tessera-test-face-p 'font-lock-type-face "float ="))
    (should (tessera-test-face-p 'font-lock-type-face "f32:"))
    (should (tessera-test-face-p 'font-lock-string-face "\"M\""))
    ;; Built-ins.
    (should (tessera-test-face-p 'font-lock-builtin-face "tile.context"))
    (should (tessera-test-face-p 'font-lock-builtin-face "context"))
    (should (tessera-test-face-p 'font-lock-builtin-face "exp("))
    (should (tessera-test-face-p 'font-lock-builtin-face "dot"))
    ;; Numbers.
    (dolist (n '("0x80" "64" "1.5e-3" ".5" "1_024" "2.0"))
      (should (tessera-test-face-p 'tessera-number-face n)))
    (should-not (tessera-test-face-p 'tessera-number-face "bf16" 1 2))
    ;; Strings: the docstring, with a `#' and quotes that do not end it.
    (should (tessera-test-face-p 'font-lock-doc-face "Docstring"))
    (should (tessera-test-face-p 'font-lock-doc-face "'quotes'"))
    (should (tessera-test-face-p 'font-lock-doc-face "# no comment"))
    (should (tessera-test-face-p 'font-lock-string-face "single # quotes"))
    (should (tessera-test-face-p 'font-lock-string-face "inside"))
    ;; Assignment targets, plain names.
    (should (tessera-test-face-p 'font-lock-variable-name-face "ctx"))
    (should (tessera-test-face-p 'font-lock-variable-name-face "BLOCK"))
    (should (null (tessera-test-face "x, x.T")))
    (should (null (tessera-test-face "A:")))))

(ert-deftest tessera-syntax-strings-and-comments ()
  (tessera-test-with-buffer tessera-test-sample
    (search-forward "no comment")
    (should (nth 3 (syntax-ppss)))
    (should-not (nth 4 (syntax-ppss)))
    (search-forward "ctx")
    (should-not (nth 8 (syntax-ppss)))
    (search-forward "single #")
    (should (nth 3 (syntax-ppss)))
    (search-forward "inside'''")
    (should-not (nth 8 (syntax-ppss)))
    (goto-char (point-min))
    (search-forward "A comm")
    (should (nth 4 (syntax-ppss)))))

;;;; Indentation

(defun tessera-test-damage (shift)
  "Move every line that does not start inside a string by SHIFT columns.
A negative SHIFT leaves lines with less indentation than that alone."
  (save-excursion
    (goto-char (point-min))
    (while (not (eobp))
      (unless (or (looking-at "[ \t]*$") (nth 3 (syntax-ppss)))
        (if (> shift 0)
            (insert (make-string shift ?\s))
          (when (>= (current-indentation) (- shift))
            (delete-char (- shift)))))
      (forward-line 1))))

(defun tessera-test-should-equal-lines (expected actual)
  "Compare EXPECTED and ACTUAL texts, reporting the first differing line."
  (let ((a (split-string expected "\n")) (b (split-string actual "\n")) (line 1))
    (while (and a b (equal (car a) (car b)))
      (setq a (cdr a) b (cdr b) line (1+ line)))
    (should (equal (list line (car a)) (list line (car b))))))

(defconst tessera-test-indent-files
  (append '("editors/emacs/test/indent.tsr")
          (mapcar (lambda (f) (file-relative-name f tessera-test-repo))
                  (append
                   (directory-files (expand-file-name "examples" tessera-test-repo) t "\\.tsr\\'")
                   (directory-files (expand-file-name "tests/corpus/valid" tessera-test-repo)
                                    t "\\.tsr\\'"))))
  "Files whose indentation is the expected one.")

(ert-deftest tessera-indent-region-keeps-correct-files ()
  (dolist (file tessera-test-indent-files)
    (let ((text (tessera-test-file-text file)))
      (with-temp-buffer
        (insert text)
        (tessera-mode)
        (indent-region (point-min) (point-max))
        (ert-info (file)
          (tessera-test-should-equal-lines text (buffer-string)))))))

(ert-deftest tessera-indent-region-repairs-shifted-lines ()
  "Every line moved by one column, either way, goes back where it belongs."
  (dolist (file tessera-test-indent-files)
    (let ((text (tessera-test-file-text file)))
      (dolist (shift '(1 -1))
        (with-temp-buffer
          (insert text)
          (tessera-mode)
          (tessera-test-damage shift)
          (should-not (equal text (buffer-string)))
          (indent-region (point-min) (point-max))
          (ert-info ((format "%s shifted by %d" file shift))
            (tessera-test-should-equal-lines text (buffer-string))))))))

(ert-deftest tessera-indent-tab-reaches-every-line ()
  "TAB then repeated TABs reach each line's indentation from column 0."
  (let ((text (tessera-test-file-text "editors/emacs/test/indent.tsr")))
    (with-temp-buffer
      (insert text)
      (tessera-mode)
      (goto-char (point-min))
      (while (not (eobp))
        (unless (or (looking-at "[ \t]*$") (nth 3 (syntax-ppss)))
          (let ((expected (current-indentation))
                (line (buffer-substring (line-beginning-position) (line-end-position)))
                (reached nil))
            (indent-line-to 0)
            (let ((this-command 'indent-for-tab-command)
                  (last-command nil))
              (dotimes (_ 6)
                (unless reached
                  (indent-for-tab-command)
                  (setq reached (= (current-indentation) expected))
                  (setq last-command 'indent-for-tab-command))))
            (ert-info (line)
              (should reached))
            (indent-line-to expected)))
        (forward-line 1)))))

(defun tessera-test-indent-after (text)
  "The column `newline-and-indent' gives after TEXT in a new buffer."
  (with-temp-buffer
    (tessera-mode)
    (insert text)
    (newline-and-indent)
    (current-column)))

(ert-deftest tessera-indent-rules ()
  (should (= (tessera-test-indent-after "def f(x: int):") 4))
  (should (= (tessera-test-indent-after "@kernel") 0))
  (should (= (tessera-test-indent-after "def f(x: int):\n    if x:  # a comment") 8))
  (should (= (tessera-test-indent-after "def f(x: int):\n    if x:\n        return x") 4))
  (should (= (tessera-test-indent-after "def f():\n    for i in r:\n        break") 4))
  (should (= (tessera-test-indent-after "def f():\n    pass") 0))
  (should (= (tessera-test-indent-after "def f():\n    y = 1") 4))
  (should (= (tessera-test-indent-after "def f(a,") 6))
  (should (= (tessera-test-indent-after "x = foo(") 4))
  (should (= (tessera-test-indent-after "def f():\n    x = dict(\n        a=1,") 8))
  (should (= (tessera-test-indent-after "x = [1, 2,") 5))
  (should (= (tessera-test-indent-after "def f(a: Tensor[\"M\", f32],\n      b: f32) -> f32:") 4))
  (should (= (tessera-test-indent-after "def f():\n    x = 1 + \\") 8))
  (should (= (tessera-test-indent-after "def f():\n    \"\"\"Doc.\n\n    More.\n    \"\"\"") 4))
  (should (= (tessera-test-indent-after "def f():\n    if x: return 1") 4))
  ;; A closing bracket lines up with the line of its opener (hanging) or the opener.
  (with-temp-buffer
    (tessera-mode)
    (insert "def f():\n    x = foo(\n        1,\n)")
    (indent-according-to-mode)
    (should (= (current-indentation) 4))
    (insert "\ny = [1,\n]")
    (indent-according-to-mode)
    (should (= (current-indentation) 4))))

(ert-deftest tessera-indent-tab-cycles ()
  (with-temp-buffer
    (tessera-mode)
    (insert "def f():\n    for i in r:\n        y = i\n")
    (let ((this-command 'indent-for-tab-command) (last-command nil) (columns nil))
      (dotimes (_ 4)
        (indent-for-tab-command)
        (push (current-indentation) columns)
        (setq last-command 'indent-for-tab-command))
      (should (equal (nreverse columns) '(8 4 0 8))))))

(ert-deftest tessera-indent-else-and-elif ()
  (with-temp-buffer
    (tessera-mode)
    (electric-indent-local-mode 1)
    (insert "def f(x):\n    if x:\n        y = 1\n        ")
    ;; Typing `else:' at the body's column dedents it as the `:' goes in.
    (insert "else")
    (let ((last-command-event ?:)) (self-insert-command 1))
    (should (equal (buffer-substring (line-beginning-position) (point)) "    else:"))
    (newline-and-indent)
    (should (= (current-column) 8))
    (insert "return 2\n")
    ;; `elif' after a `for' body: only the `if' around it takes one.
    (erase-buffer)
    (insert "if a:\n    for i in r:\n        y = i\nelif b:")
    (indent-according-to-mode)
    (should (= (current-indentation) 0))
    ;; `else' after a `for' body may belong to the `for' (deepest first).
    (erase-buffer)
    (insert "if a:\n    for i in r:\n        y = i\nelse:")
    (let ((this-command 'indent-for-tab-command) (last-command nil))
      (indent-for-tab-command)
      (should (= (current-indentation) 4))
      (setq last-command 'indent-for-tab-command)
      (indent-for-tab-command)
      (should (= (current-indentation) 0)))))

(ert-deftest tessera-indent-keeps-strings ()
  (with-temp-buffer
    (tessera-mode)
    (insert "def f():\n    \"\"\"Doc\n  odd indentation\n    \"\"\"\n")
    (goto-char (point-min))
    (forward-line 2)
    (indent-according-to-mode)
    (should (= (current-indentation) 2))))

;;;; Comments

(ert-deftest tessera-comments ()
  (with-temp-buffer
    (tessera-mode)
    (insert "def f():\n    x = 1\n")
    (should (equal comment-start "# "))
    (comment-region (point-min) (point-max))
    (should (equal (buffer-string) "# def f():\n#     x = 1\n"))
    (uncomment-region (point-min) (point-max))
    (should (equal (buffer-string) "def f():\n    x = 1\n"))
    (goto-char (point-min))
    (forward-line 1)
    (end-of-line)
    (comment-dwim nil)
    (should (string-match-p "x = 1 +# $" (buffer-substring (line-beginning-position)
                                                          (line-end-position))))))

;;;; imenu and navigation

(ert-deftest tessera-imenu ()
  (tessera-test-with-buffer
      (concat tessera-test-sample
              "\n\n@kernel\ndef saxpy(x: Tensor[\"N\", f32]):\n    pass\n"
              "\n\n@ts.kernel.autotune(\n    space=dict(BM=[64]))\ndef k2(x: Tensor[\"N\", f32]):\n    pass\n"
              "\n\ns = \"\"\"\ndef not_a_function():\n\"\"\"\n")
    (let ((index (funcall imenu-create-index-function)))
      (should (equal (mapcar #'car index) '("Kernels" "Graph functions" "Functions")))
      (should (equal (mapcar #'car (cdr (assoc "Kernels" index))) '("gemm" "saxpy" "k2")))
      (should (equal (mapcar #'car (cdr (assoc "Graph functions" index))) '("loss")))
      (should (equal (mapcar #'car (cdr (assoc "Functions" index))) '("helper")))
      (goto-char (cdr (assoc "helper" (cdr (assoc "Functions" index)))))
      (should (looking-at "def helper")))))

(ert-deftest tessera-defun-navigation ()
  (tessera-test-with-buffer tessera-test-sample
    (search-forward "y = INF")
    (beginning-of-defun)
    (should (looking-at "@ts.kernel.autotune"))
    (end-of-defun)
    (should (looking-at "\n\n@jit @autodiff"))
    (search-forward "return sum")
    (beginning-of-defun)
    (should (looking-at "@jit @autodiff"))
    (beginning-of-defun -1)
    (should (looking-at "def helper"))
    (goto-char (point-min))
    (end-of-defun)
    (should (looking-at "\n\n@jit @autodiff"))
    (goto-char (point-min))
    (search-forward "y = INF")
    (should (equal (add-log-current-defun) "gemm"))))

;;;; Tree-sitter

(defun tessera-test-query-string (query)
  "QUERY, in the s-expression syntax of `treesit-font-lock-rules', as text.
Predicates are left out: Emacs regexps are not tree-sitter's."
  (cond
   ((and (consp query) (memq (car query) '(:match :equal :pred))) "")
   ((consp query)
    (concat "(" (mapconcat #'tessera-test-query-string query " ") ")"))
   ((vectorp query)
    (concat "[" (mapconcat #'tessera-test-query-string (append query nil) " ") "]"))
   ((eq query :anchor) ".")
   ((memq query '(:? :* :+)) (substring (symbol-name query) 1))
   ((stringp query) (prin1-to-string query))
   ((symbolp query) (symbol-name query))
   (t (error "Unexpected query element: %S" query))))

(defun tessera-test-ts-queries ()
  "The queries of `tessera-ts-font-lock-rules', as one query text."
  (let ((rules tessera-ts-font-lock-rules) (queries nil))
    (while rules
      (if (keywordp (car rules))
          (setq rules (cddr rules))
        (push (mapconcat #'tessera-test-query-string (car rules) "\n") queries)
        (setq rules (cdr rules))))
    (mapconcat #'identity (nreverse queries) "\n\n")))

(ert-deftest tessera-ts-queries-compile-against-the-grammar ()
  "The tree-sitter CLI compiles the font-lock queries against the grammar, and they match."
  (let ((cli (or (getenv "TREE_SITTER") (executable-find "tree-sitter")))
        (grammar (expand-file-name "grammars/tree-sitter-tessera" tessera-test-repo)))
    (unless cli (tessera-test-missing "the tree-sitter CLI"))
    (let ((query-file (make-temp-file "tessera-ts-" nil ".scm" (tessera-test-ts-queries)))
          (sample (make-temp-file "tessera-ts-" nil ".tsr" tessera-test-sample)))
      (unwind-protect
          (with-temp-buffer
            (let* ((default-directory (file-name-as-directory grammar))
                   (status (call-process cli nil t nil "query" query-file sample)))
              (ert-info ((substring (buffer-string) 0 (min 2000 (buffer-size))))
                (should (eq status 0))
                (dolist (capture '("font-lock-keyword-face" "font-lock-doc-face"
                                   "tessera-decorator-face" "tessera-policy-face"
                                   "font-lock-type-face" "tessera-number-face"
                                   "font-lock-builtin-face" "font-lock-function-name-face"))
                  (should (string-match-p (concat "capture: \\(?:[0-9]+ - \\)?" capture ",") (buffer-string)))))))
        (delete-file query-file)
        (delete-file sample)))))

(ert-deftest tessera-ts-mode-without-tree-sitter ()
  "`tessera-ts-mode' exists everywhere and falls back to `tessera-mode' highlighting."
  (should (fboundp 'tessera-ts-mode))
  (should (eq (get 'tessera-ts-mode 'derived-mode-parent) 'tessera-mode))
  (when (and (fboundp 'treesit-available-p) (treesit-available-p)
             (treesit-ready-p 'tessera t))
    (ert-skip "the grammar is installed: see tessera-ts-mode-highlights"))
  (with-temp-buffer
    (insert tessera-test-sample)
    (let ((inhibit-message t)) (tessera-ts-mode))
    (font-lock-ensure)
    (should (eq indent-line-function #'tessera-indent-line))
    (should (tessera-test-face-p 'tessera-policy-face "@accum"))))

(ert-deftest tessera-ts-mode-highlights ()
  "With Emacs 29+ and the grammar installed, tree-sitter highlighting works."
  (unless (and (fboundp 'treesit-available-p) (treesit-available-p))
    (ert-skip "this Emacs has no tree-sitter"))
  (unless (treesit-ready-p 'tessera t)
    (ert-skip "the Tessera grammar is not installed (M-x tessera-ts-install-grammar)"))
  (with-temp-buffer
    (insert tessera-test-sample)
    (tessera-ts-mode)
    (font-lock-ensure)
    (should (tessera-test-face-p 'font-lock-keyword-face "def"))
    (should (tessera-test-face-p 'tessera-policy-face "accum"))
    (should (tessera-test-face-p 'font-lock-type-face "bf16" 2))
    (should (tessera-test-face-p 'tessera-decorator-face "@jit"))
    (should (tessera-test-face-p 'font-lock-doc-face "Docstring"))
    (should (tessera-test-face-p 'font-lock-function-name-face "gemm"))))

(ert-deftest tessera-ts-grammar-source ()
  "The grammar source registered for `treesit-install-language-grammar' exists."
  (should (file-exists-p (expand-file-name "parser.c"
                                           (expand-file-name tessera-ts-grammar-source-dir
                                                             tessera-test-repo))))
  (should (equal (tessera--checkout) tessera-test-repo))
  (when (featurep 'treesit)
    (should (equal (assq 'tessera treesit-language-source-alist)
                   (list 'tessera tessera-ts-grammar-url nil tessera-ts-grammar-source-dir)))))

(provide 'tessera-mode-test)

;;; tessera-mode-test.el ends here
