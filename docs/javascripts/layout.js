// Layout only: marks the words of inline code so that docs/stylesheets/layout.css keeps each on one line.
// A one-word <code> (a flag such as --num_batches_per_iteration, a path, an env name) gets the class
// sfx-word; in code with spaces (a command, an error message), which must wrap at its spaces for tables and
// phone screens, each word up to LONGEST_KEPT characters becomes a <span class="sfx-word">. CSS alone cannot
// do it: the line-breaking rules allow a break after any hyphen, e.g. after a flag's "--". The text stays
// as written (copying a command copies it); code blocks (<pre>) are left alone.
(() => {
  const LONGEST_KEPT = 40;  // a longer word (a long path) may still break where it must, not widen the page
  const mark = () => {
    for (const code of document.querySelectorAll(".md-typeset code")) {
      if (code.closest("pre") || code.children.length) continue;
      const text = code.textContent;
      if (!/\s/.test(text)) {
        code.classList.add("sfx-word");
        continue;
      }
      code.textContent = "";
      for (const piece of text.split(/(\s+)/)) {
        if (!piece) continue;
        if (/\s/.test(piece) || piece.length > LONGEST_KEPT) {
          code.append(piece);
        } else {
          const word = document.createElement("span");
          word.className = "sfx-word";
          word.textContent = piece;
          code.append(word);
        }
      }
    }
  };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", mark);
  else mark();
})();
