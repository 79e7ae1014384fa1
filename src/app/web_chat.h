// The web chat page that `hotcold serve` returns for `GET /`: one self-contained HTML document
// (inline CSS and JS, no external resources) that talks to the server's OpenAI-compatible
// `/v1/models` and streaming `/v1/chat/completions` endpoints.
#pragma once
#include <string_view>

namespace hc {

// The page, UTF-8; serve it as `text/html; charset=utf-8`. Static storage, never changes.
std::string_view web_chat_html();

}  // namespace hc
