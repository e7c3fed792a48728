// compactor ui: the one script. Opening a summary node in the tree loads its children in
// place; without this script the node's link opens them on a page of their own.
"use strict";
document.addEventListener("toggle", async (event) => {
  const node = event.target;
  if (!(node instanceof HTMLDetailsElement) || !node.open || !node.dataset.node || node.dataset.loaded) return;
  node.dataset.loaded = "1";
  const list = node.querySelector(":scope > ul.kids");
  try {
    const reply = await fetch("/tree/children/" + encodeURIComponent(node.dataset.node), { credentials: "same-origin" });
    if (!reply.ok) throw new Error(await reply.text());
    // The server escaped every value in this fragment (pages.children_list).
    list.innerHTML = await reply.text();
  } catch (err) {
    list.textContent = "Could not load the children: " + err.message;
  }
}, true);
