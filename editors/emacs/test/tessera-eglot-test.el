;;; tessera-eglot-test.el --- Eglot against the real Tessera language server  -*- lexical-binding: t; -*-

;;; Commentary:

;; TESSERA_LSP=/path/to/tessera-lsp emacs --batch -Q -L editors/emacs \
;;   -L editors/emacs/test -l tessera-eglot-test -f ert-run-tests-batch-and-exit
;; (run.sh does this.)  Opens a broken program of the corpus, starts Eglot
;; with `eglot-ensure' as a user's hook would, waits for Flymake to show the
;; server's diagnostics, checks them against the file's `# <- CODE' markers,
;; then replaces the text with a valid program and waits for them to clear.

;;; Code:

(require 'tessera-test-helpers)
(tessera-test-add-elpa-load-path)
(require 'tessera-mode)
(require 'flymake)

(defvar eglot-server-programs)
(declare-function eglot-current-server "eglot")
(declare-function eglot-ensure "eglot")
(declare-function eglot-shutdown "eglot")
(declare-function eglot--lookup-mode "eglot")

(ert-deftest tessera-eglot-registration ()
  (tessera-test-require 'eglot)
  (let ((entry (cl-find-if (lambda (e) (eq (cdr e) 'tessera--eglot-contact))
                           eglot-server-programs)))
    (should entry)
    (should (equal (tessera--eglot-contact) tessera-lsp-server-command)))
  ;; Both modes map to the server, with the language id "tessera".
  (when (fboundp 'eglot--lookup-mode)
    (dolist (mode '(tessera-mode tessera-ts-mode))
      (let ((found (eglot--lookup-mode mode)))
        (should found)
        (should (equal (nth 1 found) "tessera"))))))

(defun tessera-test-flymake-diagnostics ()
  "The Flymake diagnostics of the current buffer as (LINE CODE TEXT), sorted."
  (sort (mapcar (lambda (d)
                  (let ((text (flymake-diagnostic-text d)))
                    (list (line-number-at-pos (flymake-diagnostic-beg d))
                          (and (string-match "\\[\\([EW][0-9]\\{4\\}\\)\\]" text)
                               (match-string 1 text))
                          text)))
                (flymake-diagnostics))
        (lambda (a b) (< (car a) (car b)))))

(defun tessera-test-relevant (diagnostics)
  "DIAGNOSTICS without the target lints."
  (cl-remove-if (lambda (d) (member (nth 1 d) tessera-test-target-lints)) diagnostics))

(ert-deftest tessera-eglot-diagnostics-from-the-server ()
  (tessera-test-require 'eglot)
  (let* ((tessera-lsp-server-command (list (tessera-test-server)))
         (file (tessera-test-project "tests/corpus/invalid/e0200_undefined.tsr"))
         (buffer (find-file-noselect file))
         (server nil))
    (unwind-protect
        (progn
          ;; Flymake waits for the buffer to be shown before it checks.
          (switch-to-buffer buffer)
          (should (eq major-mode 'tessera-mode))
          (let ((expected (tessera-test-markers)))
            (should expected)
            ;; What `(add-hook 'tessera-mode-hook #'eglot-ensure)' does; Eglot
            ;; connects after the command, which batch mode has to imitate.
            (eglot-ensure)
            (run-hooks 'post-command-hook)
            (setq server (tessera-test-wait #'eglot-current-server 30 "Eglot to connect"))
            (let ((diagnostics
                   (tessera-test-wait
                    (lambda ()
                      (let ((d (tessera-test-relevant (tessera-test-flymake-diagnostics))))
                        (and (>= (length d) (length expected)) d)))
                    60 "the server's diagnostics in Flymake")))
              (ert-info ((format "diagnostics: %S" diagnostics))
                ;; Every marker has a diagnostic with its code on its line...
                (dolist (marker expected)
                  (should (cl-find-if (lambda (d) (and (= (car d) (car marker))
                                                       (equal (nth 1 d) (cdr marker))))
                                      diagnostics)))
                ;; ... no error is anywhere else, and the text is the server's.
                (dolist (d diagnostics)
                  (should (assoc (car d) expected))
                  (should (string-match-p "\\`tessera \\[E0200\\]: undefined name `tile_[mnk]`"
                                          (nth 2 d))))))
            ;; A valid program replaces the text: the server gets the change
            ;; and the diagnostics go away.
            (erase-buffer)
            (insert (tessera-test-valid-program))
            (tessera-test-wait
             (lambda () (null (tessera-test-relevant (tessera-test-flymake-diagnostics))))
             60 "the diagnostics to clear after the fix")
            ;; A new mistake typed in is reported where it is.
            (goto-char (point-min))
            (search-forward "ctx = tile.context()\n")
            (insert "    z = missing_name + 1\n")
            (let ((line (1- (line-number-at-pos))))
              (tessera-test-wait
               (lambda ()
                 (cl-find-if (lambda (d) (and (= (car d) line)
                                              (equal (nth 1 d) "E0200")
                                              (string-match-p "missing_name" (nth 2 d))))
                             (tessera-test-flymake-diagnostics)))
               60 "an E0200 diagnostic for the edit"))))
      (when server
        (let ((inhibit-message t)) (ignore-errors (eglot-shutdown server))))
      (with-current-buffer buffer (set-buffer-modified-p nil))
      (kill-buffer buffer)
      (delete-directory (file-name-directory file) t))))

(provide 'tessera-eglot-test)

;;; tessera-eglot-test.el ends here
