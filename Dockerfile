# One image for both services; the command picks which one runs.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY shared ./shared
COPY agent_service ./agent_service
COPY conversation_service ./conversation_service
COPY migrations ./migrations
COPY docs ./docs
RUN pip install --no-cache-dir .
RUN useradd --system --uid 10001 app
USER app
EXPOSE 8000 8001
