/* Search in the site opened from disk (file://).
 *
 * Browsers refuse to start a Web Worker from a file URL, and Material's search runs in one.
 * On file pages only, this replaces Worker by a hidden frame that runs the worker's script and
 * passes messages both ways. Material's offline plugin would instead load a shim of this kind
 * from a CDN; naming this file "iframe-worker" in mkdocs.yml's extra.polyfills stops it from
 * adding that, so the site asks no other host (tests/test_docs.py checks it), also offline.
 *
 * Enough for the search worker, which only exchanges messages (English needs no importScripts).
 */
(function () {
  "use strict";
  if (location.protocol !== "file:") {
    return;
  }

  // Runs first inside the frame: the worker's postMessage goes to this page, and its own
  // window keeps a hidden name for what the page delivers.
  var BOOT =
    "window.postMessage = function (data) { parent.postMessage(data, '*'); };" +
    "window.importScripts = function () {" +
    "  throw new Error('importScripts is not available in a page opened from disk');" +
    "};";

  class FrameWorker extends EventTarget {
    constructor(url) {
      super();
      this.onmessage = null;
      this.onerror = null;
      this._waiting = [];
      this._loaded = false;
      var source = new URL(String(url), location.href).href;
      var frame = document.createElement("iframe");
      frame.setAttribute("aria-hidden", "true");
      frame.style.display = "none";
      frame.srcdoc =
        "<script>" + BOOT + "<\/script>" +
        '<script src="' + source.replace(/&/g, "&amp;").replace(/"/g, "&quot;") + '"><\/script>';
      this._frame = frame;
      var self = this;
      frame.addEventListener("load", function () {
        self._loaded = true;
        self._waiting.splice(0).forEach(function (data) {
          self._deliver(data);
        });
      });
      window.addEventListener("message", function (event) {
        if (event.source === frame.contentWindow) {
          self._emit("message", event.data);
        }
      });
      (document.body || document.documentElement).appendChild(frame);
    }

    postMessage(data) {
      if (this._loaded) {
        this._deliver(data);
      } else {
        this._waiting.push(data);
      }
    }

    terminate() {
      this._frame.remove();
    }

    _deliver(data) {
      // The frame shares this page's origin (srcdoc), so the event is handed over directly:
      // its own postMessage now answers this page.
      var inside = this._frame.contentWindow;
      inside.dispatchEvent(new inside.MessageEvent("message", { data: data }));
    }

    _emit(type, data) {
      var event = new MessageEvent(type, { data: data });
      if (typeof this.onmessage === "function") {
        this.onmessage(event);
      }
      this.dispatchEvent(event);
    }
  }

  window.Worker = FrameWorker;
})();
