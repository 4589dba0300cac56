;;; tessera-lsp-mode-test.el --- lsp-mode against the real Tessera language server  -*- lexical-binding: t; -*-

;;; Commentary:

;; TESSERA_LSP=/path/to/tessera-lsp emacs --batch -Q -L editors/emacs \
;;   -L editors/emacs/test -l tessera-lsp-mode-test -f ert-run-tests-batch-and-exit
;; (run.sh does this.)  The client registration, then lsp-mode connected to
;; the server on a broken program of the corpus: the diagnostics lsp-mode
;; stores match the file's `# <- CODE' markers, and an edit is reported.

;;; Code:

(require 'tessera-test-helpers)
(tessera-test-add-elpa-load-path)
(require 'tessera-mode)

(defvar lsp-clients)
(defvar lsp-language-id-configuration)
(defvar lsp-session-file)
(defvar lsp-auto-guess-root)
(defvar lsp-diagnostics-provider)
(defvar lsp-enable-file-watchers)
(defvar lsp-keep-workspace-alive)
(defvar lsp-restart)
(defvar lsp-enable-snippet)
(defvar lsp-modeline-code-actions-enable)
(defvar lsp-modeline-diagnostics-enable)
(defvar lsp-modeline-workspace-status-enable)
(defvar lsp-headerline-breadcrumb-enable)
(defvar lsp-lens-enable)
(defvar lsp-semantic-tokens-enable)
(defvar lsp-enable-on-type-formatting)
(defvar lsp-idle-delay)
(declare-function lsp "lsp-mode")
(declare-function lsp-diagnostics "lsp-mode")
(declare-function lsp-workspaces "lsp-mode")
(declare-function lsp-workspace-shutdown "lsp-mode")
(declare-function lsp-workspace-folders-add "lsp-mode")
(declare-function lsp--workspace-client "lsp-mode")
(declare-function lsp--client-server-id "lsp-mode")
(declare-function lsp--client-major-modes "lsp-mode")
(declare-function lsp--client-new-connection "lsp-mode")
(declare-function lsp-buffer-language "lsp-mode")
(declare-function lsp-session "lsp-mode")
(declare-function lsp-session-folders "lsp-mode")
(declare-function lsp:diagnostic-code? "lsp-protocol")
(declare-function lsp:diagnostic-message "lsp-protocol")
(declare-function lsp:diagnostic-range "lsp-protocol")
(declare-function lsp:range-start "lsp-protocol")
(declare-function lsp:position-line "lsp-protocol")

(defun tessera-test-lsp-mode-setup ()
  "Load lsp-mode, set up for a batch session in a scratch directory."
  (tessera-test-require 'lsp-mode)
  (setq lsp-session-file (expand-file-name "session" (make-temp-file "tessera-lsp-" t))
        lsp-auto-guess-root nil
        lsp-diagnostics-provider :none
        lsp-enable-file-watchers nil
        lsp-keep-workspace-alive nil
        lsp-restart 'ignore
        lsp-enable-snippet nil
        lsp-modeline-code-actions-enable nil
        lsp-modeline-diagnostics-enable nil
        lsp-modeline-workspace-status-enable nil
        lsp-headerline-breadcrumb-enable nil
        lsp-lens-enable nil
        lsp-semantic-tokens-enable nil
        lsp-enable-on-type-formatting nil
        lsp-idle-delay 0.1))

(ert-deftest tessera-lsp-mode-registration ()
  (tessera-test-lsp-mode-setup)
  (let ((client (gethash 'tessera-lsp lsp-clients)))
    (should client)
    (should (equal (lsp--client-major-modes client) '(tessera-mode tessera-ts-mode)))
    (should (equal (alist-get 'tessera-mode lsp-language-id-configuration) "tessera"))
    (should (equal (alist-get 'tessera-ts-mode lsp-language-id-configuration) "tessera"))
    ;; The connection tests for the program of `tessera-lsp-server-command'
    ;; (the end-to-end test below runs it).
    (let* ((connection (lsp--client-new-connection client))
           (tessera-lsp-server-command '("sh" "-c" "true")))
      (should (functionp (plist-get connection :connect)))
      (should (funcall (plist-get connection :test?)))
      (let ((tessera-lsp-server-command '("no-such-tessera-lsp-program")))
        (should-not (funcall (plist-get connection :test?)))))))

(defun tessera-test-lsp-diagnostics (file)
  "The diagnostics lsp-mode holds for FILE as (LINE CODE MESSAGE), LINE 1-based."
  (let ((table (lsp-diagnostics t)))
    (sort (mapcar (lambda (d)
                    (list (1+ (lsp:position-line (lsp:range-start (lsp:diagnostic-range d))))
                          (lsp:diagnostic-code? d)
                          (lsp:diagnostic-message d)))
                  (gethash file table))
          (lambda (a b) (< (car a) (car b))))))

(ert-deftest tessera-lsp-mode-diagnostics-from-the-server ()
  (tessera-test-lsp-mode-setup)
  (let* ((tessera-lsp-server-command (list (tessera-test-server)))
         (file (tessera-test-project "tests/corpus/invalid/e0200_undefined.tsr"))
         (root (file-name-directory file))
         (buffer (find-file-noselect file))
         (workspaces nil))
    (unwind-protect
        (progn
          (switch-to-buffer buffer)
          (should (eq major-mode 'tessera-mode))
          (lsp-workspace-folders-add (directory-file-name root))
          (let ((inhibit-message t)) (lsp))
          (setq workspaces (tessera-test-wait #'lsp-workspaces 30 "lsp-mode to connect"))
          (should (eq (lsp--client-server-id (lsp--workspace-client (car workspaces)))
                      'tessera-lsp))
          (should (equal (lsp-buffer-language) "tessera"))
          (let* ((expected (tessera-test-markers))
                 (diagnostics
                  (tessera-test-wait
                   (lambda ()
                     (let ((d (tessera-test-lsp-diagnostics file)))
                       (and (>= (length d) (length expected)) d)))
                   60 "the server's diagnostics in lsp-mode")))
            (ert-info ((format "diagnostics: %S" diagnostics))
              (dolist (marker expected)
                (should (member (cdr marker)
                                (mapcar #'cadr (cl-remove-if-not
                                                (lambda (d) (= (car d) (car marker)))
                                                diagnostics)))))
              (dolist (d diagnostics)
                (should (assoc (car d) expected))
                (should (string-match-p "\\`undefined name `tile_[mnk]`" (nth 2 d))))))
          ;; An edit reaches the server.
          (erase-buffer)
          (insert (tessera-test-valid-program))
          (goto-char (point-min))
          (search-forward "ctx = tile.context()\n")
          (insert "    z = missing_name + 1\n")
          (let ((line (1- (line-number-at-pos))))
            (tessera-test-wait
             (lambda ()
               (let ((d (cl-remove-if (lambda (d) (member (nth 1 d) tessera-test-target-lints))
                                      (tessera-test-lsp-diagnostics file))))
                 (and (= (length d) 1)
                      (= (car (car d)) line)
                      (equal (nth 1 (car d)) "E0200"))))
             60 "exactly one E0200 diagnostic, for the edit")))
      (let ((inhibit-message t))
        (dolist (workspace workspaces)
          (ignore-errors (lsp-workspace-shutdown workspace))))
      (with-current-buffer buffer (set-buffer-modified-p nil))
      (kill-buffer buffer)
      (delete-directory root t))))

(provide 'tessera-lsp-mode-test)

;;; tessera-lsp-mode-test.el ends here
