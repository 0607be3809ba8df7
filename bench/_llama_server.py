"""llama.cpp serving a GGUF file over OpenAI's streamed `/v1/completions` and `/v1/models`, as llama-cpp-python's own
server serves them: `Llama.create_completion(..., stream=True)`, one request at a time under a lock (its
`llama_outer_lock`), each chunk a server-sent event, then `data: [DONE]`. `bench/serving_load.py` runs it where
`llama_cpp.server`'s app cannot start: a venv with llama-cpp-python but without its `[server]` extras
(`sse_starlette`, `starlette_context`).

    python bench/_llama_server.py --model model.gguf --port 8001 [--n_ctx 256] [--n_threads N]
"""

# No `from __future__ import annotations`: FastAPI reads the route's `Request` hint, imported in `main`.
import argparse
import json
import threading


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--n_ctx", type=int, default=256)
    parser.add_argument("--n_threads", type=int, default=1)
    args = parser.parse_args()

    import uvicorn
    from fastapi import FastAPI, Request
    from fastapi.responses import StreamingResponse
    from llama_cpp import Llama

    llm = Llama(
        args.model,
        n_ctx=args.n_ctx,
        n_threads=args.n_threads,
        n_threads_batch=args.n_threads,
        logits_all=False,
        verbose=False,
    )
    lock = threading.Lock()
    app = FastAPI()

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": args.model, "object": "model", "owned_by": "llama.cpp"}]}

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await request.json()
        temperature = float(body.get("temperature", 0.8))
        repeat_penalty = float(body.get("repeat_penalty", 1.0))

        def events():
            with lock:  # one generation at a time, as llama-cpp-python's server
                chunks = llm.create_completion(
                    body["prompt"],
                    max_tokens=int(body.get("max_tokens", 16)),
                    temperature=temperature,
                    repeat_penalty=repeat_penalty,
                    stream=True,
                )
                for chunk in chunks:
                    yield f"data: {json.dumps(chunk)}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
