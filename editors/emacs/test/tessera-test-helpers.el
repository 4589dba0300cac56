;;; tessera-test-helpers.el --- Shared helpers of the tessera-mode tests  -*- lexical-binding: t; -*-

;;; Commentary:

;; Loaded by the suites of editors/emacs/test (see run.sh there).  Under
;; CI=true a missing dependency (Eglot, lsp-mode, the language server, the
;; tree-sitter CLI) fails the test that needs it; elsewhere it skips it.

;;; Code:

(require 'ert)
(require 'cl-lib)

(defconst tessera-test-dir
  (file-name-directory (or load-file-name buffer-file-name))
  "editors/emacs/test/.")

(defconst tessera-test-repo
  (file-name-as-directory (expand-file-name "../../.." tessera-test-dir))
  "The root of the Tessera repository.")

(defconst tessera-test-elpa-dirs
  (append (split-string (or (getenv "TESSERA_ELPA_DIRS") "") ":" t)
          '("/usr/share/emacs/site-lisp/elpa"))
  "Directories holding installed ELPA packages (Debian's elpa-* packages).")

(defun tessera-test-ci-p ()
  "Non-nil under CI, where a missing dependency is a failure."
  (member (getenv "CI") '("true" "1" "yes")))

(defun tessera-test-missing (what)
  "Skip the current test because WHAT is missing, or fail under CI."
  (if (tessera-test-ci-p)
      (ert-fail (format "%s is missing (CI=true: a failure, not a skip)" what))
    (ert-skip (format "%s is missing" what))))

(defun tessera-test-add-elpa-load-path ()
  "Put the installed ELPA packages (eglot, lsp-mode and their dependencies) on `load-path'."
  (dolist (dir tessera-test-elpa-dirs)
    (when (file-directory-p dir)
      (dolist (pkg (directory-files dir t "\\`[[:alnum:]]"))
        (when (file-directory-p pkg)
          (add-to-list 'load-path pkg t))))))

(defun tessera-test-require (feature)
  "Load FEATURE, or skip (fail under CI) when it is not installed."
  (unless (require feature nil t)
    (require 'package)
    (package-initialize)
    (unless (require feature nil t)
      (tessera-test-missing (format "the Emacs package `%s'" feature)))))

(defun tessera-test-server ()
  "The language server program from $TESSERA_LSP, or skip (fail under CI)."
  (let ((server (getenv "TESSERA_LSP")))
    (unless (and server (file-executable-p server))
      (tessera-test-missing (format "the language server ($TESSERA_LSP=%s)" server)))
    server))

(defun tessera-test-run-idle-timers ()
  "Run the idle timers, as an interactive Emacs does when the user pauses.
Batch mode never becomes idle, and Eglot (didChange), lsp-mode and
Flymake act on idle timers."
  (dolist (timer (copy-sequence timer-idle-list))
    (when (memq timer timer-idle-list)
      (timer-event-handler timer))))

(defun tessera-test-wait (predicate seconds what)
  "Process events until PREDICATE returns non-nil, at most SECONDS; return its value.
The idle timers run between tries.  Fail naming WHAT on a timeout."
  (let ((deadline (+ (float-time) seconds))
        (result nil))
    (while (and (not (setq result (funcall predicate)))
                (< (float-time) deadline))
      (accept-process-output nil 0.1)
      (tessera-test-run-idle-timers))
    (or result
        (ert-fail (format "timed out after %ss waiting for %s" seconds what)))))

(defun tessera-test-markers ()
  "The expected diagnostics of the current buffer, from `# <- CODE' comments.
A list of (LINE . CODE), LINE 1-based (tests/corpus/README.md)."
  (save-excursion
    (goto-char (point-min))
    (let (markers)
      (while (re-search-forward "# <- \\([EW][0-9]\\{4\\}\\)" nil t)
        (push (cons (line-number-at-pos) (match-string-no-properties 1)) markers))
      (nreverse markers))))

(defconst tessera-test-target-lints
  '("E0500" "E0501" "E0703" "W0600" "W0601" "W0602" "W0603" "W0604" "W0702")
  "Codes of the target lints, which depend on the target analyses (ignored).")

(defun tessera-test-project (file)
  "A fresh project directory holding tessera.toml and a copy of FILE; return the copy."
  (let* ((dir (file-name-as-directory (make-temp-file "tessera-emacs-" t)))
         (copy (expand-file-name (file-name-nondirectory file) dir)))
    (with-temp-file (expand-file-name "tessera.toml" dir)
      (insert "target = \"sm_90\"\n"))
    (with-temp-file copy
      (insert-file-contents (expand-file-name file tessera-test-repo)))
    copy))

(defun tessera-test-valid-program ()
  "The text of a valid program of the corpus."
  (with-temp-buffer
    (insert-file-contents (expand-file-name "tests/corpus/valid/gemm.tsr" tessera-test-repo))
    (buffer-string)))

(provide 'tessera-test-helpers)

;;; tessera-test-helpers.el ends here
